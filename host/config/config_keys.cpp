// config_keys.cpp — the key table (config_keys()): one row per key with its name, the Config
// member it sets, its resume class and its help; how values parse (numbers with digit groups,
// bools, lists) and print. Derived values and key lookups are in config.cpp, loading in
// config_load.cpp, validation in config_validate.cpp.
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "compute/error.h"
#include "host/config/config.h"
#include "host/schedule/registry.h"

namespace carousel {

namespace {

// MaxText-style digit groups: "32_000" is 32000. An underscore counts only between two digits;
// anything else stays and fails the number parse.
std::string without_digit_groups(const std::string& text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const bool group = text[i] == '_' && i > 0 && i + 1 < text.size() &&
                       std::isdigit(static_cast<unsigned char>(text[i - 1])) &&
                       std::isdigit(static_cast<unsigned char>(text[i + 1]));
    if (!group) out += text[i];
  }
  return out;
}

// from_chars over all of `text` (a leading '+' allowed); the errc, or invalid_argument when
// characters are left over.
template <class T>
std::errc parse_number(const std::string& text, T& v) {
  const std::string t = without_digit_groups(text);
  const char* begin = t.data() + (t.size() > 1 && t[0] == '+' && t[1] != '-' ? 1 : 0);
  const auto [end, ec] = std::from_chars(begin, t.data() + t.size(), v);
  if (ec != std::errc()) return ec;
  return end == t.data() + t.size() ? std::errc() : std::errc::invalid_argument;
}

std::int64_t parse_int(const std::string& key, const std::string& text) {
  CAROUSEL_CHECK(!text.empty(), "config key '{}' has no value; it expects an integer", key);
  std::int64_t v = 0;
  const std::errc ec = parse_number(text, v);
  CAROUSEL_CHECK(ec != std::errc::result_out_of_range,
                 "config key '{}' expects an integer, got '{}', which is out of range (at most "
                 "{} in magnitude)",
                 key, text, std::numeric_limits<std::int64_t>::max());
  CAROUSEL_CHECK(ec == std::errc(),
                 "config key '{}' expects an integer, got '{}' (a whole number such as 100; "
                 "digit groups as in 32_000 are allowed)",
                 key, text);
  return v;
}

double parse_float(const std::string& key, const std::string& text) {
  CAROUSEL_CHECK(!text.empty(), "config key '{}' has no value; it expects a number", key);
  double v = 0;
  const std::errc ec = parse_number(text, v);
  CAROUSEL_CHECK(ec == std::errc() || ec == std::errc::result_out_of_range,
                 "config key '{}' expects a number, got '{}' (e.g. 0.001 or 1e-3)", key, text);
  CAROUSEL_CHECK(ec == std::errc() && std::isfinite(v),
                 "config key '{}' expects a finite number, got '{}' (inf, nan and values beyond "
                 "1.8e308 are not accepted)",
                 key, text);
  return v;
}

bool parse_bool(const std::string& key, const std::string& text) {
  if (text == "true" || text == "True" || text == "1") return true;
  if (text == "false" || text == "False" || text == "0") return false;
  fail("config key '{}' expects true or false, got '{}'", key, text);
}

// "[1, 3]", "1,3", "1 3" or "" (empty): a list of integers, as list keys are written on the
// command line (a YAML list arrives joined by commas, config_load.cpp).
std::vector<std::int64_t> parse_int_list(const std::string& key, const std::string& text) {
  std::string t = text;
  const auto first = t.find_first_not_of(" \t");
  const auto last = t.find_last_not_of(" \t");
  t = first == std::string::npos ? "" : t.substr(first, last - first + 1);
  if (t.size() >= 2 && t.front() == '[' && t.back() == ']') t = t.substr(1, t.size() - 2);
  // Commas separate items: none may be empty ("1,,7" is a typo, not [1, 7]).
  if (t.find_first_not_of(" \t") != std::string::npos) {
    std::size_t from = 0;
    for (;;) {
      const std::size_t comma = std::min(t.find(',', from), t.size());
      CAROUSEL_CHECK(t.find_first_not_of(" \t", from) < comma,
                     "config key '{}' expects a list of integers such as [1, 3] or 1,3 (empty for "
                     "none), got '{}' (an empty item between commas)",
                     key, text);
      if (comma == t.size()) break;
      from = comma + 1;
    }
  }
  for (char& c : t) c = c == ',' ? ' ' : c;
  std::vector<std::int64_t> out;
  std::size_t at = 0;
  while ((at = t.find_first_not_of(" \t", at)) != std::string::npos) {
    const std::size_t end = std::min(t.find_first_of(" \t", at), t.size());
    const std::string item = t.substr(at, end - at);
    std::int64_t v = 0;
    CAROUSEL_CHECK(parse_number(item, v) == std::errc(),
                   "config key '{}' expects a list of integers such as [1, 3] or 1,3 (empty for "
                   "none), got '{}' ('{}' is not an integer)",
                   key, text, item);
    out.push_back(v);
    at = end;
  }
  return out;
}

std::string to_text(std::int64_t v) { return std::to_string(v); }
std::string to_text(const std::vector<std::int64_t>& v) {
  return fmt::format("[{}]", fmt::join(v, ", "));
}
std::string to_text(double v) { return fmt::format("{}", v); }
std::string to_text(bool v) { return v ? "true" : "false"; }
std::string to_text(const std::string& v) { return v; }

template <class T>
const char* type_name() {
  if constexpr (std::is_same_v<T, std::int64_t>) return "int";
  if constexpr (std::is_same_v<T, double>) return "float";
  if constexpr (std::is_same_v<T, bool>) return "bool";
  if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) return "[int]";
  return "string";
}

template <class T>
T parse(const std::string& key, const std::string& text) {
  if constexpr (std::is_same_v<T, std::int64_t>) return parse_int(key, text);
  if constexpr (std::is_same_v<T, double>) return parse_float(key, text);
  if constexpr (std::is_same_v<T, bool>) return parse_bool(key, text);
  if constexpr (std::is_same_v<T, std::string>) return text;
  if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) return parse_int_list(key, text);
}

// A key stored in Config.
// A key's member is one of these types; its type name and parser follow from it.
template <class T>
constexpr bool kKeyType =
    std::is_same_v<T, std::int64_t> || std::is_same_v<T, double> || std::is_same_v<T, bool> ||
    std::is_same_v<T, std::string> || std::is_same_v<T, std::vector<std::int64_t>>;

template <class T>
ConfigKey key(const char* name, T Config::*member, ResumeClass resume, std::string help) {
  static_assert(kKeyType<T>,
                "a config key's member is std::int64_t, double, bool, std::string "
                "or std::vector<std::int64_t>");
  return {name,
          type_name<T>(),
          std::move(help),
          resume,
          [member](const Config& c) { return to_text(c.*member); },
          [member, name](Config& c, const std::string& v) { c.*member = parse<T>(name, v); }};
}

// A key stored in Config::model (a model shape key, set by presets).
template <class T>
ConfigKey model_key(const char* name, T ModelConfig::*member, const char* help,
                    ResumeClass resume = ResumeClass::Model) {
  static_assert(kKeyType<T>,
                "a config key's member is std::int64_t, double, bool, std::string "
                "or std::vector<std::int64_t>");
  return {name,
          type_name<T>(),
          help,
          resume,
          [member](const Config& c) { return to_text(c.model.*member); },
          [member, name](Config& c, const std::string& v) { c.model.*member = parse<T>(name, v); }};
}

}  // namespace

const std::vector<ConfigKey>& config_keys() {
  static const std::vector<ConfigKey> keys = {
      key("model_name", &Config::model_name, ResumeClass::Training,
          "named model shape (tiny, llama2-7b, llama2-13b, llama3-8b, llama3-70b); sets the model "
          "keys below"),
      model_key("decoder_block", &ModelConfig::decoder_block, "llama | simple"),
      model_key("vocab_size", &ModelConfig::vocab_size, "V"),
      model_key("base_emb_dim", &ModelConfig::emb_dim, "E, model width"),
      model_key("base_num_decoder_layers", &ModelConfig::num_layers, "N, decoder layers"),
      model_key("base_num_query_heads", &ModelConfig::num_query_heads, "H; head_dim = E/H"),
      // Run control on resume: validation holds it at -1 or E/H, so it cannot change the model.
      key("head_dim", &Config::head_dim, ResumeClass::RunControl,
          "-1 = E/H; carousel derives the head size, so any other value must equal E/H"),
      model_key("base_num_kv_heads", &ModelConfig::num_kv_heads, "Hkv (grouped-query attention)"),
      model_key("base_mlp_dim", &ModelConfig::mlp_dim, "Fm, MLP hidden width"),
      model_key("max_target_length", &ModelConfig::max_target_length, "T, sequence length"),
      model_key("rope_max_timescale", &ModelConfig::rope_max_timescale, "RoPE theta"),
      model_key("normalization_layer_epsilon", &ModelConfig::norm_eps, "RMSNorm epsilon"),
      model_key("logits_via_embedding", &ModelConfig::logits_via_embedding,
                "tie lm_head to the embedding"),
      model_key("num_experts", &ModelConfig::num_experts,
                "X, routed experts of each mixture-of-experts layer (1 = a dense model)"),
      model_key("num_experts_per_tok", &ModelConfig::num_experts_per_tok,
                "k, experts each token is routed to"),
      model_key("base_moe_mlp_dim", &ModelConfig::moe_mlp_dim,
                "Fe, each expert's MLP width (-1 = base_mlp_dim)"),
      model_key("shared_experts", &ModelConfig::shared_experts,
                "experts every token passes through beside the routed ones (DeepSeek), fused into "
                "one MLP of width shared_experts x Fe"),
      model_key("first_num_dense_layers", &ModelConfig::first_num_dense_layers,
                "leading layers that keep the dense MLP (DeepSeek); the rest are MoE"),
      model_key("routed_score_func", &ModelConfig::routed_score_func,
                "router scores: softmax (Mixtral, Qwen-MoE) | sigmoid (DeepSeek-V3)"),
      model_key("norm_topk_prob", &ModelConfig::norm_topk_prob,
                "divide the chosen experts' weights by their sum"),
      model_key("routed_scaling_factor", &ModelConfig::routed_scaling_factor,
                "multiplies every routed expert's weight (DeepSeek-V3: 2.5)"),
      model_key("load_balance_loss_weight", &ModelConfig::load_balance_loss_weight,
                "alpha of the load-balancing loss, computed per sequence (0 = none)"),
      model_key("routed_bias", &ModelConfig::routed_bias,
                "auxiliary-loss-free balancing (DeepSeek-V3): a per-expert bias added to the "
                "scores for the choice only"),
      model_key("routed_bias_update_rate", &ModelConfig::routed_bias_update_rate,
                "after each step bias += rate x sign(mean load - the expert's load) (0 = fixed)"),
      model_key("capacity_factor", &ModelConfig::capacity_factor,
                "-1 = dropless, every token reaches its k experts (the only mode carousel has)"),
      model_key("quantization", &ModelConfig::quantization,
                "'' (none) | fp8: the attention and MLP projections' GEMMs in float8, E4M3 "
                "activations and weights forward, E5M2 output gradients backward (Transformer "
                "Engine's hybrid); the embedding, head, router, norms and routed experts stay in "
                "the compute dtype (docs/float8.md)",
                ResumeClass::Training),
      model_key("fp8_recipe", &ModelConfig::fp8_recipe,
                "tensorwise: each GEMM operand's scale = float8 max / its amax now, over the "
                "whole tensor (reduced over the tensor and context ranks holding parts of it)",
                ResumeClass::Training),
      key("run_name", &Config::run_name, ResumeClass::RunControl,
          "run directory name under base_output_directory; the same name resumes that run; empty "
          "(default): a new directory <model_name>_<YYYY-MM-DD-HH-MM-SS>"),
      key("base_output_directory", &Config::base_output_directory, ResumeClass::RunControl,
          "where runs write checkpoints and metrics"),
      key("steps", &Config::steps, ResumeClass::RunControl, "training steps"),
      key("log_period", &Config::log_period, ResumeClass::RunControl,
          "print a step line every this many steps"),
      key("metrics_file", &Config::metrics_file, ResumeClass::RunControl,
          "JSON-lines metrics (default <run directory>/metrics.jsonl)"),
      key("enable_tensorboard", &Config::enable_tensorboard, ResumeClass::RunControl,
          "write TensorBoard event files (the metrics.jsonl values) to <run "
          "directory>/tensorboard/ as the run goes"),
      key("log_level", &Config::log_level, ResumeClass::RunControl,
          "trace | debug | info | warn | error | off"),
      key("progress_bar", &Config::progress_bar, ResumeClass::RunControl,
          "auto (a progress line on a terminal, step lines then go to the log file) | always | "
          "never"),
      key("profiler_steps", &Config::profiler_steps, ResumeClass::RunControl,
          "measure this many steps into <run directory>/trace.json (Chrome/Perfetto: compute, "
          "pipe and fsdp rows per rank, send->recv arrows, the predicted schedule beside); 0 = "
          "off"),
      key("skip_first_n_steps_for_profiler", &Config::skip_first_n_steps_for_profiler,
          ResumeClass::RunControl, "steps of this run to skip before profiling (warm-up)"),
      key("ici_pipeline_parallelism", &Config::ici_pipeline_parallelism, ResumeClass::Layout,
          "S: pipeline stages, one device group each"),
      key("num_pipeline_microbatches", &Config::num_pipeline_microbatches, ResumeClass::Layout,
          "M: microbatches per step (-1 = S, or 2S with the forwarding delay); B must divide; "
          "0 and other negatives are errors"),
      key("num_pipeline_repeats", &Config::num_pipeline_repeats, ResumeClass::Layout,
          "R: circular repeats (-1 = layers / (S x L), or pipeline_stage_layers' entries / S; "
          "0 and other negatives are errors)"),
      key("num_layers_per_pipeline_stage", &Config::num_layers_per_pipeline_stage,
          ResumeClass::Layout, "L: consecutive layers a stage runs per visit"),
      key("pipeline_stage_layers", &Config::pipeline_stage_layers, ResumeClass::Layout,
          "uneven stages: layers of each virtual stage in order, S x R entries summing to the "
          "decoder layers, e.g. [1, 3] or 1,3 (first and last stages lighter: they also run the "
          "embedding and the head); empty = L each"),
      key("decoder_first_pipeline_num_layers", &Config::decoder_first_pipeline_num_layers,
          ResumeClass::Layout,
          "Megatron's uneven stages: layers of the first virtual stage, the others split the "
          "rest evenly (-1 = unset)"),
      key("decoder_last_pipeline_num_layers", &Config::decoder_last_pipeline_num_layers,
          ResumeClass::Layout,
          "Megatron's uneven stages: layers of the last virtual stage (-1 = unset)"),
      key("pipeline_parallel_layers", &Config::pipeline_parallel_layers, ResumeClass::Layout,
          "MaxText: the pipeline's stages split layers [0, P); the layers after them, the final "
          "norm and the head run after the pipeline on every stage rank, microbatch m on rank "
          "m % S (gpipe, circular, looped_bfs); -1 = every layer pipelined"),
      key("pipeline_schedule", &Config::pipeline_schedule, ResumeClass::Layout,
          schedule::schedule_names(" | ")),
      key("pipeline_delay_activation_forwarding", &Config::pipeline_delay_activation_forwarding,
          ResumeClass::Layout,
          "circular: forward stage outputs one iteration later (MaxText's d = 2)"),
      key("pipeline_microbatch_group_size", &Config::pipeline_microbatch_group_size,
          ResumeClass::Layout,
          "interleaved_1f1b / interleaved_zb group g (S = depth-first .. M = breadth-first; "
          "0 = the smallest divisor of M that is at least S: S when S divides M)"),
      key("ici_fsdp_parallelism", &Config::ici_fsdp_parallelism, ResumeClass::Layout,
          "F: FSDP degree inside a stage (weights gathered before use)"),
      key("ici_data_parallelism", &Config::ici_data_parallelism, ResumeClass::Layout,
          "D: data-parallel replicas of the whole pipeline (gradients all-reduced)"),
      key("ici_tensor_parallelism", &Config::ici_tensor_parallelism, ResumeClass::Layout,
          "T: tensor parallelism (Megatron, with sequence parallelism): each layer's heads and "
          "MLP columns split over T neighbouring ranks (llama only)"),
      key("ici_context_parallelism", &Config::ici_context_parallelism, ResumeClass::Layout,
          "C: context parallelism: each sequence split into 2C chunks over C ranks (rank i holds "
          "chunks i and 2C-1-i), keys and values all-gathered for attention (llama only)"),
      key("ici_expert_parallelism", &Config::ici_expert_parallelism, ResumeClass::Layout,
          "E: expert parallelism: each MoE layer's routed experts split over E ranks, tokens "
          "sent to their experts' ranks and back (all-to-all); the E ranks also split the "
          "batch like data replicas"),
      key("dcn_data_parallelism", &Config::dcn_data_parallelism, ResumeClass::Layout,
          "MaxText's factor of D across nodes: D = ici x dcn (folded into ici_data_parallelism)"),
      key("dcn_pipeline_parallelism", &Config::dcn_pipeline_parallelism, ResumeClass::Layout,
          "S's factor across nodes (folded into ici_pipeline_parallelism)"),
      key("dcn_fsdp_parallelism", &Config::dcn_fsdp_parallelism, ResumeClass::Layout,
          "F's factor across nodes (folded into ici_fsdp_parallelism)"),
      key("dcn_context_parallelism", &Config::dcn_context_parallelism, ResumeClass::Layout,
          "C's factor across nodes (folded into ici_context_parallelism)"),
      key("dcn_tensor_parallelism", &Config::dcn_tensor_parallelism, ResumeClass::Layout,
          "T's factor across nodes (folded into ici_tensor_parallelism)"),
      key("replica_check_interval", &Config::replica_check_interval, ResumeClass::RunControl,
          "with D > 1, every N steps and before each checkpoint the data replicas' weights are "
          "compared bit for bit; a difference stops the run naming the replica and parameter "
          "(0 = off)"),
      key("shard_optimizer_over_data", &Config::shard_optimizer_over_data, ResumeClass::Layout,
          "ZeRO-1: AdamW state and update sharded over the D data replicas (gradients "
          "reduce-scattered, updated weights all-gathered)"),
      key("pipeline_fsdp_ag_per_repeat", &Config::pipeline_fsdp_ag_per_repeat, ResumeClass::Layout,
          "Buffer Sliding Window: 2 weight slots, next repeat prefetched during the current"),
      key("pipeline_fsdp_ag_once", &Config::pipeline_fsdp_ag_once, ResumeClass::Layout,
          "gather every local stage's weights once per step (R slots)"),
      key("pipeline_prefetch_lookahead", &Config::pipeline_prefetch_lookahead, ResumeClass::Layout,
          "issue a weight gather at most this many compute actions before use (0 = as soon as "
          "a slot is free)"),
      key("peak_flops", &Config::peak_flops, ResumeClass::RunControl,
          "one device's peak FLOP/s for the MFU in step lines; 0 = known GPUs by name, a GEMM "
          "measured at start-up on CPUs"),
      key("collective_timeout_seconds", &Config::collective_timeout_seconds,
          ResumeClass::RunControl,
          "a communication waiting longer than this fails, naming the rank and operation"),
      key("cpu_link_gigabytes_per_second", &Config::cpu_link_gigabytes_per_second,
          ResumeClass::RunControl,
          "ranks as threads: sends and receives between them take bytes / this (10^9 bytes/s), "
          "as over a link between GPUs, so communication costs time against compute (benchmarks "
          "of overlap on CPUs); 0 = memory speed"),
      key("schedule_costs_file", &Config::schedule_costs_file, ResumeClass::RunControl,
          "schedule_costs.yml a profiled run wrote (profiler_steps): its measured schedule_cost_* "
          "values replace the defaults"),
      key("schedule_cost_f", &Config::schedule_cost_f, ResumeClass::RunControl,
          "schedule cost model: forward, per layer"),
      key("schedule_cost_b", &Config::schedule_cost_b, ResumeClass::RunControl,
          "full backward, per layer"),
      key("schedule_cost_w", &Config::schedule_cost_w, ResumeClass::RunControl,
          "weight-gradient part of the backward (zb_h1's W), per layer"),
      key("schedule_cost_p2p", &Config::schedule_cost_p2p, ResumeClass::RunControl,
          "activation hand-off latency"),
      key("schedule_cost_all_gather", &Config::schedule_cost_all_gather, ResumeClass::RunControl,
          "all-gather of one layer's weights"),
      key("schedule_cost_reduce_scatter", &Config::schedule_cost_reduce_scatter,
          ResumeClass::RunControl, "reduce-scatter of one layer's gradients"),
      key("schedule_cost_head", &Config::schedule_cost_head, ResumeClass::RunControl,
          "forward/backward cost of the final norm, logits and loss in layers, added to the last "
          "stage (why uneven stages pay; `carousel schedule` prints this model's estimate)"),
      key("schedule_cost_exchange", &Config::schedule_cost_exchange, ResumeClass::RunControl,
          "one all-to-all of an MoE layer's routed rows with its expert ranks (E > 1): two per "
          "MoE layer in a forward, two or four (remat) in a backward"),
      key("per_device_batch_size", &Config::per_device_batch_size, ResumeClass::Layout,
          "sequences per device per step; global batch B = this x devices"),
      key("dtype", &Config::dtype, ResumeClass::Training,
          "compute dtype: float32 | bfloat16 (bf16 weight copies and activations, float32 sums; "
          "the CPU emulates it)"),
      key("weight_dtype", &Config::weight_dtype, ResumeClass::Training,
          "master weights, gradients, optimizer state: float32"),
      key("device", &Config::device, ResumeClass::Layout,
          "cpu | cuda | auto (cuda when a GPU is visible); with several devices on cuda, device "
          "d is a logical device on GPU d % visible GPUs"),
      key("gpu_kernels", &Config::gpu_kernels, ResumeClass::Layout,
          "fast (cuBLASLt, cuDNN flash attention, fused kernels) | reference (the simple kernels "
          "the fast ones are checked against) on device=cuda; the CPU ignores it"),
      key("rehearse_gpu_kernels", &Config::rehearse_gpu_kernels, ResumeClass::RunControl,
          "device=cpu: each CPU device takes bfloat16 tensors wherever the GPU's fast tier does "
          "(its native ops and their dtype rules) and computes them on float32 copies, the same "
          "bits as without it: a bfloat16 run on CPUs that stops wherever the GPU run would"),
      key("step_graphs", &Config::step_graphs, ResumeClass::RunControl,
          "on | off | auto (on for GPUs): each rank's forward and backward captured once at its "
          "second step (a CUDA graph) and replayed, where they do not communicate (otherwise the "
          "log says why and steps run eagerly); on the CPU a bitwise-equal emulation that holds "
          "every buffer of the step at once"),
      key("remat_policy", &Config::remat_policy, ResumeClass::Layout,
          "full (keep stage inputs, recompute in backward) | none (keep everything) | keep each "
          "layer's input and: minimal (q, k, v, out_proj, gate, up: recompute the norms, "
          "attention, SwiGLU) | save_dot_with_context_except_mlp | save_qkv_proj | "
          "save_out_proj (MaxText's names)"),
      key("init_weights_seed", &Config::init_weights_seed, ResumeClass::Training,
          "parameter initialisation seed"),
      key("learning_rate", &Config::learning_rate, ResumeClass::Training, "peak learning rate"),
      key("adam_b1", &Config::adam_b1, ResumeClass::Training, "AdamW beta1"),
      key("adam_b2", &Config::adam_b2, ResumeClass::Training, "AdamW beta2"),
      key("adam_eps", &Config::adam_eps, ResumeClass::Training, "AdamW epsilon"),
      key("adam_weight_decay", &Config::adam_weight_decay, ResumeClass::Training,
          "decoupled weight decay (matrices)"),
      key("gradient_clipping_threshold", &Config::gradient_clipping_threshold,
          ResumeClass::Training, "clip the global gradient L2 norm to this (0 = off)"),
      key("skip_step_on_nonfinite", &Config::skip_step_on_nonfinite, ResumeClass::Training,
          "a step whose loss or gradient norm is NaN or infinite is skipped on every rank (no "
          "update; counted and logged) instead of stopping the run"),
      key("lr_schedule_type", &Config::lr_schedule_type, ResumeClass::Training,
          "cosine (warmup, cosine decay) | wsd (warmup, constant, decay over the last "
          "wsd_decay_steps_fraction)"),
      key("warmup_steps_fraction", &Config::warmup_steps_fraction, ResumeClass::Training,
          "linear warmup over this fraction of the schedule"),
      key("learning_rate_final_fraction", &Config::learning_rate_final_fraction,
          ResumeClass::Training,
          "the decay (cosine or wsd) ends at this fraction of learning_rate (MaxText's old name "
          "cosine_learning_rate_final_fraction is read as this, with a warning)"),
      key("wsd_decay_steps_fraction", &Config::wsd_decay_steps_fraction, ResumeClass::Training,
          "wsd: the decay phase is this fraction of the schedule's steps (its end)"),
      key("wsd_decay_style", &Config::wsd_decay_style, ResumeClass::Training,
          "wsd: the decay's shape, linear | cosine"),
      key("learning_rate_schedule_steps", &Config::learning_rate_schedule_steps,
          ResumeClass::Training, "length of the schedule (-1 = steps); learning rate 0 after it"),
      key("dataset_type", &Config::dataset_type, ResumeClass::Training,
          "synthetic | tokens (llm.c shards) | text"),
      key("dataset_path", &Config::dataset_path, ResumeClass::Training,
          "tokens: shard file or glob; text: a text file (bytes are tokens); several datasets "
          "mixed by weight: PATH,WEIGHT entries separated by ';' (e.g. a/*.bin,0.7;b/*.bin,0.3)"),
      key("enable_data_shuffling", &Config::enable_data_shuffling, ResumeClass::Training,
          "read each dataset's sequences (non-overlapping windows of max_target_length + 1 "
          "tokens) in a permutation per epoch instead of in order; MaxText's key, but off by "
          "default here"),
      key("data_shuffle_seed", &Config::data_shuffle_seed, ResumeClass::Training,
          "the shuffling permutations' seed (enable_data_shuffling)"),
      key("packing", &Config::packing, ResumeClass::Training,
          "sequences hold several documents, each ending with eos_id: attention stays within a "
          "document and RoPE positions restart at each (MaxText's packing, Megatron's "
          "reset_attention_mask + reset_position_ids); off: plain causal attention over the "
          "sequence"),
      key("eos_id", &Config::eos_id, ResumeClass::Training,
          "the token that ends a document (packing); -1 = the eos token of tokenizer_path"),
      key("tokenizer_path", &Config::tokenizer_path, ResumeClass::Training,
          "Hugging Face tokenizer.json the tokens were made with (scripts/prepare_data.py); with "
          "dataset_type=tokens its vocabulary must fit vocab_size (checked when the data opens)"),
      key("eval_interval", &Config::eval_interval, ResumeClass::Training,
          "evaluate the held-out loss every this many steps (0 = off); needs eval_dataset_path "
          "unless dataset_type=synthetic"),
      key("eval_steps", &Config::eval_steps, ResumeClass::Training,
          "batches of global batch size per evaluation (-1 = one pass over the eval split)"),
      key("eval_dataset_path", &Config::eval_dataset_path, ResumeClass::Training,
          "held-out data in dataset_type's format (tokens: shard file or glob; text: a file); "
          "MaxText names it by eval_dataset_name / eval_split"),
      key("enable_checkpointing", &Config::enable_checkpointing, ResumeClass::RunControl,
          "write checkpoints (and resume from the run's latest)"),
      key("checkpoint_period", &Config::checkpoint_period, ResumeClass::RunControl,
          "save every this many steps (0 = only at the end)"),
      key("async_checkpointing", &Config::async_checkpointing, ResumeClass::RunControl,
          "write checkpoint files on a thread of their own while training goes on (at most one "
          "in flight; the next save and the run's end wait for it)"),
      key("max_num_checkpoints_to_keep", &Config::max_num_checkpoints_to_keep,
          ResumeClass::RunControl,
          "keep the newest N complete checkpoints, removing older ones after each save (0 = "
          "keep all); the newest complete checkpoint is never removed"),
      key("load_parameters_path", &Config::load_parameters_path, ResumeClass::RunControl,
          "start from these parameters: a checkpoint step directory or a HF Llama directory"),
  };
  return keys;
}

const char* resume_class_name(ResumeClass c) {
  switch (c) {
    case ResumeClass::Model:
      return "model";
    case ResumeClass::Layout:
      return "layout";
    case ResumeClass::RunControl:
      return "run-control";
    case ResumeClass::Training:
      return "training";
  }
  return "?";
}

}  // namespace carousel
