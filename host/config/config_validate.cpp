// config_validate.cpp — Config::validate(): every key's own range first (so a message never
// blames another key), then the rules between keys (batch, divisibility, schedule), then the
// size limits of one microbatch's activations. Each failure names the key, the value and what
// would be valid.
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "compute/error.h"
#include "host/config/config.h"
#include "host/config/paths.h"
#include "host/config/schedule_config.h"
#include "host/schedule/registry.h"
#include "models/params.h"
#include "models/stage.h"

namespace carousel {

namespace {

constexpr std::int64_t kMaxSteps = 1'000'000'000'000;  // 1e12 steps (and periods)
constexpr std::int64_t kMaxMeshAxis = 4096;            // S, F, D, T each
constexpr std::int64_t kMaxDevices = 65536;            // S x F x D x T
constexpr std::int64_t kMaxMicrobatches = 65536;       // M (and g)
constexpr double kMaxPerDeviceBatch = 65536;           // sequences per device
constexpr std::int64_t kMaxGlobalBatch = std::int64_t(1) << 24;
constexpr double kMaxScheduleCost = 1e12;

// The schedule cost model's keys and values.
std::vector<std::pair<const char*, double>> schedule_cost_keys(const Config& c) {
  return {{"schedule_cost_f", c.schedule_cost_f},
          {"schedule_cost_b", c.schedule_cost_b},
          {"schedule_cost_w", c.schedule_cost_w},
          {"schedule_cost_p2p", c.schedule_cost_p2p},
          {"schedule_cost_all_gather", c.schedule_cost_all_gather},
          {"schedule_cost_reduce_scatter", c.schedule_cost_reduce_scatter},
          {"schedule_cost_head", c.schedule_cost_head},
          {"schedule_cost_exchange", c.schedule_cost_exchange}};
}

// Each float key must be finite; validate() also runs on configs built in code, not parsed.
void check_finite(const Config& c) {
  std::vector<std::pair<const char*, double>> floats = {
      {"per_device_batch_size", c.per_device_batch_size},
      {"learning_rate", c.learning_rate},
      {"adam_b1", c.adam_b1},
      {"adam_b2", c.adam_b2},
      {"adam_eps", c.adam_eps},
      {"adam_weight_decay", c.adam_weight_decay},
      {"gradient_clipping_threshold", c.gradient_clipping_threshold},
      {"warmup_steps_fraction", c.warmup_steps_fraction},
      {"learning_rate_final_fraction", c.learning_rate_final_fraction},
      {"wsd_decay_steps_fraction", c.wsd_decay_steps_fraction},
      {"collective_timeout_seconds", c.collective_timeout_seconds},
      {"cpu_link_gigabytes_per_second", c.cpu_link_gigabytes_per_second},
      {"peak_flops", c.peak_flops},
  };
  for (const auto& [key, v] : schedule_cost_keys(c)) floats.emplace_back(key, v);
  for (const auto& [key, v] : floats) {
    CAROUSEL_CHECK(std::isfinite(v), "{}={} is not valid; it must be a finite number", key, v);
  }
}

void check_schedule_costs(const Config& c) {
  for (const auto& [key, v] : schedule_cost_keys(c)) {
    CAROUSEL_CHECK(v >= 0 && v <= kMaxScheduleCost, "{}={} is not valid; it must be in [0, {}]",
                   key, v, kMaxScheduleCost);
  }
  CAROUSEL_CHECK(c.schedule_cost_f > 0 && c.schedule_cost_b > 0,
                 "schedule_cost_f={} and schedule_cost_b={} must be > 0 (a layer's forward and "
                 "backward take time)",
                 c.schedule_cost_f, c.schedule_cost_b);
}

// -1 (automatic) or lo..hi.
void check_auto_or_range(const char* key, std::int64_t v, std::int64_t lo, std::int64_t hi,
                         const char* auto_means) {
  CAROUSEL_CHECK(v == -1 || (v >= lo && v <= hi),
                 "{}={} is not valid; it must be -1 ({}) or in [{}, {}]", key, v, auto_means, lo,
                 hi);
}

// The largest tensors one microbatch materializes, each at most kMaxTensorElements.
void check_activation_sizes(const Config& c) {
  const ModelConfig& m = c.model;
  const std::int64_t rows = c.global_batch() / c.microbatches();
  const std::int64_t T = m.max_target_length;
  const std::int64_t E = m.emb_dim, Fm = m.mlp_dim, V = m.vocab_size, H = m.num_query_heads;
  struct Tensor {
    const char* what;
    std::string shape;
    std::optional<std::int64_t> n;
  };
  const Tensor tensors[] = {
      {"activations", fmt::format("B/M x T x E = {} x {} x {}", rows, T, E),
       checked_product({rows, T, E})},
      {"MLP activations", fmt::format("B/M x T x base_mlp_dim = {} x {} x {}", rows, T, Fm),
       checked_product({rows, T, Fm})},
      {"logits", fmt::format("B/M x T x vocab_size = {} x {} x {}", rows, T, V),
       checked_product({rows, T, V})},
      {"attention scores", fmt::format("B/M x H x T x T = {} x {} x {} x {}", rows, H, T, T),
       checked_product({rows, H, T, T})},
  };
  for (const auto& t : tensors) {
    CAROUSEL_CHECK(t.n && *t.n <= kMaxTensorElements,
                   "one microbatch's {} ({}) have {} elements, above the limit of 2^40 = {}; "
                   "lower per_device_batch_size or max_target_length (T), or raise "
                   "num_pipeline_microbatches (M)",
                   t.what, t.shape, t.n ? std::to_string(*t.n) : std::string("more than 2^63"),
                   kMaxTensorElements);
  }
}

// lr_schedule_type and its wsd keys; warmup and decay must fit in the schedule (as in MaxText).
void check_lr_schedule(const Config& c) {
  CAROUSEL_CHECK(c.lr_schedule_type == "cosine" || c.lr_schedule_type == "wsd",
                 "lr_schedule_type='{}' is not valid; use cosine or wsd", c.lr_schedule_type);
  CAROUSEL_CHECK(c.wsd_decay_style == "linear" || c.wsd_decay_style == "cosine",
                 "wsd_decay_style='{}' is not valid; use linear or cosine", c.wsd_decay_style);
  CAROUSEL_CHECK(c.wsd_decay_steps_fraction >= 0 && c.wsd_decay_steps_fraction <= 1,
                 "wsd_decay_steps_fraction={} must be in [0, 1]", c.wsd_decay_steps_fraction);
  if (c.lr_schedule_type != "wsd") return;
  const std::int64_t total = c.schedule_steps();
  const std::int64_t warmup = std::llround(c.warmup_steps_fraction * double(total));
  const auto decay = std::int64_t(c.wsd_decay_steps_fraction * double(total));
  CAROUSEL_CHECK(warmup + decay <= total,
                 "wsd_decay_steps_fraction={} + warmup_steps_fraction={} leave no room: {} "
                 "warmup + {} decay steps exceed the schedule's {} steps; their sum must be at "
                 "most 1",
                 c.wsd_decay_steps_fraction, c.warmup_steps_fraction, warmup, decay, total);
}

}  // namespace

void Config::validate() const {
  model.validate();
  check_finite(*this);
  // Each key's own range.
  check_range("steps", steps, 1, kMaxSteps);
  check_range("log_period", log_period, 1, kMaxSteps);
  check_range("profiler_steps", profiler_steps, 0, kMaxSteps);
  CAROUSEL_CHECK(peak_flops >= 0 && peak_flops <= 1e18,
                 "peak_flops={} is not valid; it must be a device's FLOP/s in [0, 1e18] (0 = known "
                 "GPUs by name, measured on CPUs)",
                 peak_flops);
  check_range("skip_first_n_steps_for_profiler", skip_first_n_steps_for_profiler, 0, kMaxSteps);
  check_range("checkpoint_period", checkpoint_period, 0, kMaxSteps, " (0 = only at the end)");
  check_range("max_num_checkpoints_to_keep", max_num_checkpoints_to_keep, 0, kMaxSteps,
              " (0 = keep all)");
  check_auto_or_range("learning_rate_schedule_steps", learning_rate_schedule_steps, 0, kMaxSteps,
                      "= steps");
  CAROUSEL_CHECK(head_dim == -1 || head_dim == model.head_dim(),
                 "head_dim={} is not valid; carousel derives the head size as base_emb_dim / "
                 "base_num_query_heads = {} / {} = {}: set head_dim={} or -1 (or leave it out)",
                 head_dim, model.emb_dim, model.num_query_heads, model.head_dim(),
                 model.head_dim());
  check_range("init_weights_seed", init_weights_seed, 0, std::numeric_limits<std::int64_t>::max());
  check_range("ici_pipeline_parallelism", ici_pipeline_parallelism, 1, kMaxMeshAxis);
  check_range("ici_fsdp_parallelism", ici_fsdp_parallelism, 1, kMaxMeshAxis);
  check_range("ici_data_parallelism", ici_data_parallelism, 1, kMaxMeshAxis);
  check_range("ici_tensor_parallelism", ici_tensor_parallelism, 1, kMaxMeshAxis);
  check_tensor_split(model, int(ici_tensor_parallelism));
  check_range("ici_context_parallelism", ici_context_parallelism, 1, kMaxMeshAxis);
  check_range("ici_expert_parallelism", ici_expert_parallelism, 1, kMaxMeshAxis);
  if (ici_expert_parallelism > 1) {
    CAROUSEL_CHECK(model.is_moe(),
                   "ici_expert_parallelism={} splits routed experts, and this model has none "
                   "(num_experts={}); set num_experts > 1 or ici_expert_parallelism=1",
                   ici_expert_parallelism, model.num_experts);
    CAROUSEL_CHECK(model.num_experts % ici_expert_parallelism == 0,
                   "ici_expert_parallelism={} does not divide num_experts={}: each expert rank "
                   "holds num_experts / E whole experts",
                   ici_expert_parallelism, model.num_experts);
  }
  CAROUSEL_CHECK(ici_context_parallelism == 1 || model.is_llama(),
                 "ici_context_parallelism={} needs decoder_block=llama: context parallelism splits "
                 "the sequence that attention runs over, which decoder_block={} does not have",
                 ici_context_parallelism, model.decoder_block);
  CAROUSEL_CHECK(
      ici_context_parallelism == 1 || model.max_target_length % (2 * ici_context_parallelism) == 0,
      "ici_context_parallelism={} splits each sequence into 2 x {} = {} chunks (rank i "
      "holds chunks i and {}-i, for causal balance), but max_target_length={} is not a "
      "multiple of {}",
      ici_context_parallelism, ici_context_parallelism, 2 * ici_context_parallelism,
      2 * ici_context_parallelism - 1, model.max_target_length, 2 * ici_context_parallelism);
  check_range("num_layers_per_pipeline_stage", num_layers_per_pipeline_stage, 1, 4096);
  check_auto_or_range("num_pipeline_microbatches", num_pipeline_microbatches, 1, kMaxMicrobatches,
                      "= S, or 2S with the forwarding delay");
  check_auto_or_range("num_pipeline_repeats", num_pipeline_repeats, 1, 4096, "= layers / (S x L)");
  check_range("pipeline_microbatch_group_size", pipeline_microbatch_group_size, 0, kMaxMicrobatches,
              " (0 = S)");
  check_range("pipeline_prefetch_lookahead", pipeline_prefetch_lookahead, 0, 1 << 20,
              " (0 = as early as a slot is free)");
  CAROUSEL_CHECK(per_device_batch_size > 0 && per_device_batch_size <= kMaxPerDeviceBatch,
                 "per_device_batch_size={} is not valid; it must be in (0, {}]",
                 per_device_batch_size, kMaxPerDeviceBatch);
  check_schedule_costs(*this);
  CAROUSEL_CHECK(num_devices() <= kMaxDevices,
                 "ici_data_parallelism x ici_expert_parallelism x ici_pipeline_parallelism x "
                 "ici_fsdp_parallelism x ici_tensor_parallelism x ici_context_parallelism = {} x "
                 "{} x {} x {} x {} x {} = {} devices; at most {} are supported",
                 ici_data_parallelism, ici_expert_parallelism, ici_pipeline_parallelism,
                 ici_fsdp_parallelism, ici_tensor_parallelism, ici_context_parallelism,
                 num_devices(), kMaxDevices);
  // Rules between keys.
  const double batch = per_device_batch_size * double(num_devices());
  CAROUSEL_CHECK(batch >= 1 - 1e-9 && std::abs(batch - double(global_batch())) < 1e-9,
                 "per_device_batch_size={} x {} device(s) = {} sequences is not a positive whole "
                 "number",
                 per_device_batch_size, num_devices(), batch);
  CAROUSEL_CHECK(global_batch() <= kMaxGlobalBatch,
                 "the global batch per_device_batch_size x devices = {} x {} = {} is above {}",
                 per_device_batch_size, num_devices(), global_batch(), kMaxGlobalBatch);
  validate_pipeline();
  check_microbatch_split();
  check_activation_sizes(*this);
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
  CAROUSEL_CHECK(gpu_kernels == "fast" || gpu_kernels == "reference",
                 "gpu_kernels='{}' is not valid; use fast (cuBLASLt, cuDNN attention, fused "
                 "kernels) or reference (the simple CUDA kernels, the fast tier's oracle)",
                 gpu_kernels);
  CAROUSEL_CHECK(!rehearse_gpu_kernels || device == "cpu",
                 "rehearse_gpu_kernels=true is for device=cpu (CPU devices following the GPU "
                 "fast tier's rules), but device={}; on a GPU the fast tier follows them itself: "
                 "drop the key or use device=cpu",
                 device);
  CAROUSEL_CHECK(!rehearse_gpu_kernels || dtype == "bfloat16",
                 "rehearse_gpu_kernels=true changes nothing with dtype={}: the GPU fast tier's "
                 "rules differ from the CPU's for bfloat16 only; use dtype=bfloat16 or drop the "
                 "key",
                 dtype);
  CAROUSEL_CHECK(step_graphs == "on" || step_graphs == "off" || step_graphs == "auto",
                 "step_graphs='{}' is not valid; use on, off or auto (on for GPUs, off for the "
                 "CPU)",
                 step_graphs);
  check_range("replica_check_interval", replica_check_interval, 0, kMaxSteps);
  parse_remat_policy(remat_policy);  // one error listing the policies
  CAROUSEL_CHECK(spdlog::level::from_str(log_level) != spdlog::level::off || log_level == "off",
                 "log_level='{}' is not valid; use trace, debug, info, warn, error or off",
                 log_level);
  CAROUSEL_CHECK(progress_bar == "auto" || progress_bar == "always" || progress_bar == "never",
                 "progress_bar='{}' is not valid; use auto (a bar on a terminal), always or never",
                 progress_bar);
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
  CAROUSEL_CHECK(learning_rate_final_fraction >= 0 && learning_rate_final_fraction <= 1,
                 "learning_rate_final_fraction={} must be in [0, 1]", learning_rate_final_fraction);
  check_lr_schedule(*this);
  CAROUSEL_CHECK(dataset_type == "synthetic" || dataset_type == "tokens" || dataset_type == "text",
                 "dataset_type='{}' is not valid; use synthetic, tokens or text", dataset_type);
  CAROUSEL_CHECK(dataset_type == "synthetic" || !dataset_path.empty(),
                 "dataset_type={} needs dataset_path=FILE", dataset_type);
  // carousel reads and writes local paths only: a URL would otherwise become a local folder.
  check_local_path("base_output_directory", base_output_directory);
  check_local_path("load_parameters_path", load_parameters_path);
  check_local_path("dataset_path", dataset_path);
  check_local_path("tokenizer_path", tokenizer_path);
  check_local_path("eval_dataset_path", eval_dataset_path);
  CAROUSEL_CHECK(eval_interval >= 0, "eval_interval={} must be >= 0 (0 = no evaluation)",
                 eval_interval);
  CAROUSEL_CHECK(eval_steps == -1 || eval_steps >= 1,
                 "eval_steps={} is not valid; use -1 (one pass over the eval split) or >= 1",
                 eval_steps);
  CAROUSEL_CHECK(eval_interval == 0 || dataset_type == "synthetic" || !eval_dataset_path.empty(),
                 "eval_interval={} needs eval_dataset_path=FILE_OR_GLOB (the held-out split, "
                 "e.g. out/data/val_*.bin from scripts/prepare_data.py)",
                 eval_interval);
  check_local_path("metrics_file", metrics_file);
  if (packing) {
    CAROUSEL_CHECK(model.is_llama(),
                   "packing=true needs decoder_block=llama (the simple block has no attention)");
    CAROUSEL_CHECK(eos_id >= -1 && eos_id < model.vocab_size,
                   "eos_id={} is not a token id; valid: 0 to vocab_size-1={} (or -1: the eos "
                   "token of tokenizer_path)",
                   eos_id, model.vocab_size - 1);
  }
  CAROUSEL_CHECK(dataset_type != "text" || model.vocab_size >= 256,
                 "dataset_type=text uses bytes as tokens and needs vocab_size >= 256, got {}",
                 model.vocab_size);
  CAROUSEL_CHECK(
      collective_timeout_seconds > 0 && collective_timeout_seconds <= kMaxCollectiveTimeoutSeconds,
      "collective_timeout_seconds={} is not valid; it must be a number of seconds in "
      "(0, {}] (30 days)",
      collective_timeout_seconds, kMaxCollectiveTimeoutSeconds);
  CAROUSEL_CHECK(cpu_link_gigabytes_per_second >= 0,
                 "cpu_link_gigabytes_per_second={} is not valid; use 0 (memory speed) or a "
                 "positive speed in 10^9 bytes/s",
                 cpu_link_gigabytes_per_second);
  CAROUSEL_CHECK(run_name.find('/') == std::string::npos && run_name != "." && run_name != "..",
                 "run_name='{}' must be a name without '/' (and not . or ..), or empty for a new "
                 "run directory named after the model and the time",
                 run_name);
  // A control character (a newline, an escape) makes a directory name no listing or shell shows
  // as typed; the message shows the name with the characters escaped.
  const auto control = std::find_if(run_name.begin(), run_name.end(),
                                    [](unsigned char c) { return c < 0x20 || c == 0x7f; });
  CAROUSEL_CHECK(control == run_name.end(),
                 "run_name={:?} holds a control character (byte {:#04x} at position {}); use "
                 "printable characters",
                 run_name, unsigned((unsigned char)*control), control - run_name.begin());
}

namespace {

// "base_num_decoder_layers=8", or "pipeline_parallel_layers=6" when the pipeline runs only those:
// the layers the stages split, named by the key that sets them.
std::string pipelined_text(const Config& c) {
  return c.pipeline_parallel_layers == -1
             ? fmt::format("base_num_decoder_layers={}", c.model.num_layers)
             : fmt::format("pipeline_parallel_layers={}", c.pipeline_parallel_layers);
}

// pipeline_parallel_layers: how many layers the stages split; the layers after them run outside
// the pipeline (the schedule's fit is the registry's check).
void check_layers_outside(const Config& c) {
  const std::int64_t N = c.model.num_layers, P = c.pipeline_parallel_layers;
  CAROUSEL_CHECK(P == -1 || (P >= 1 && P <= N),
                 "pipeline_parallel_layers={} is not valid; give how many of the "
                 "base_num_decoder_layers={} layers the pipeline runs (1 to {}; the layers after "
                 "them run outside it, on every stage rank), or -1 for all of them",
                 P, N, N);
}

// Even stages: S x R x L = the pipelined decoder layers.
void check_even_stages(const Config& c) {
  const std::int64_t S = c.ici_pipeline_parallelism, L = c.num_layers_per_pipeline_stage;
  const std::int64_t N = c.pipelined_layers();
  const std::string layers = pipelined_text(c);
  CAROUSEL_CHECK(c.num_pipeline_repeats != -1 || N % (S * L) == 0,
                 "{} is not divisible by ici_pipeline_parallelism x "
                 "num_layers_per_pipeline_stage = {} x {}; choose S and L so that S x L divides "
                 "the layers (or give uneven stages with pipeline_stage_layers)",
                 layers, S, L);
  CAROUSEL_CHECK(S * c.repeats() * L == N,
                 "ici_pipeline_parallelism x num_pipeline_repeats x "
                 "num_layers_per_pipeline_stage = {} x {} x {} must equal "
                 "{}",
                 S, c.repeats(), L, layers);
}

// Uneven stages: pipeline_stage_layers (S x R counts, each >= 1, summing to the layers) or
// Megatron's first/last keys (the other stages split the rest evenly), never both, and not
// together with num_layers_per_pipeline_stage.
void check_uneven_stages(const Config& c) {
  const std::int64_t S = c.ici_pipeline_parallelism, R = c.repeats(), V = S * R;
  const std::int64_t N = c.pipelined_layers();
  const std::string layers = pipelined_text(c);
  const std::int64_t first = c.decoder_first_pipeline_num_layers;
  const std::int64_t last = c.decoder_last_pipeline_num_layers;
  CAROUSEL_CHECK(c.num_layers_per_pipeline_stage == 1,
                 "num_layers_per_pipeline_stage={} and uneven stages ({}) both set the layers of "
                 "a stage; keep one (the uneven layout gives every stage's count)",
                 c.num_layers_per_pipeline_stage,
                 c.pipeline_stage_layers.empty() ? "decoder_first/last_pipeline_num_layers"
                                                 : "pipeline_stage_layers");
  if (!c.pipeline_stage_layers.empty()) {
    const auto& counts = c.pipeline_stage_layers;
    const std::string text = fmt::format("[{}]", fmt::join(counts, ", "));
    CAROUSEL_CHECK(first == -1 && last == -1,
                   "pipeline_stage_layers={} and decoder_first/last_pipeline_num_layers both set "
                   "the stage layout; keep one",
                   text);
    CAROUSEL_CHECK(std::int64_t(counts.size()) == V,
                   "pipeline_stage_layers={} has {} entries, but the pipeline has "
                   "ici_pipeline_parallelism x num_pipeline_repeats = {} x {} = {} virtual stages; "
                   "give one layer count per virtual stage{}",
                   text, counts.size(), S, R, V,
                   c.num_pipeline_repeats == -1 ? " (with num_pipeline_repeats=-1, a multiple of "
                                                  "S entries sets R)"
                                                : "");
    std::int64_t sum = 0;
    for (std::size_t v = 0; v < counts.size(); ++v) {
      CAROUSEL_CHECK(counts[v] >= 1 && counts[v] <= N,
                     "pipeline_stage_layers={} gives virtual stage {} {} layers; every stage "
                     "needs between 1 and {} layers",
                     text, v, counts[v], layers);
      sum += counts[v];
    }
    CAROUSEL_CHECK(sum == N,
                   "pipeline_stage_layers={} sums to {} layers, but {}; "
                   "the counts must add up to the decoder layers",
                   text, sum, layers);
    return;
  }
  for (const auto& [key, value] : {std::pair{"decoder_first_pipeline_num_layers", first},
                                   std::pair{"decoder_last_pipeline_num_layers", last}}) {
    CAROUSEL_CHECK(value == -1 || (value >= 1 && value <= N),
                   "{}={} is not valid; give between 1 and {} layers, or "
                   "-1 for unset",
                   key, value, layers);
  }
  const std::int64_t fixed_stages = (first != -1) + (last != -1);
  const std::int64_t fixed_layers =
      std::max<std::int64_t>(first, 0) + std::max<std::int64_t>(last, 0);
  const char* key =
      first != -1 ? "decoder_first_pipeline_num_layers" : "decoder_last_pipeline_num_layers";
  const std::int64_t value = first != -1 ? first : last;
  CAROUSEL_CHECK(V >= fixed_stages + 1,
                 "{}={}: the pipeline has {} virtual stage(s) (S x R = {} x {}), too few: the "
                 "first/last stage given needs at least one other stage; raise S or R",
                 key, value, V, S, R);
  const std::int64_t rest = N - fixed_layers, others = V - fixed_stages;
  CAROUSEL_CHECK(rest >= others && rest % others == 0,
                 "{}={}: with decoder_first_pipeline_num_layers={} and "
                 "decoder_last_pipeline_num_layers={}, {} of {} layers "
                 "are left for the {} other virtual stages, which cannot split them evenly (at "
                 "least 1 each); choose counts that leave a multiple of {}, or give every stage's "
                 "count with pipeline_stage_layers",
                 key, value, first, last, rest, layers, others, others);
}

}  // namespace

void Config::validate_pipeline() const {
  const std::int64_t S = ici_pipeline_parallelism, L = num_layers_per_pipeline_stage;
  // Own ranges (validate() checks them too; `carousel schedule` may call this alone).
  check_range("ici_pipeline_parallelism", S, 1, kMaxMeshAxis);
  check_range("num_layers_per_pipeline_stage", L, 1, 4096);
  check_auto_or_range("num_pipeline_microbatches", num_pipeline_microbatches, 1, kMaxMicrobatches,
                      "= S, or 2S with the forwarding delay");
  check_auto_or_range("num_pipeline_repeats", num_pipeline_repeats, 1, 4096, "= layers / (S x L)");
  check_layers_outside(*this);
  if (uneven_stages()) {
    check_uneven_stages(*this);
  } else {
    check_even_stages(*this);
  }
  // The schedule, by the registry's checks (generate()'s messages). A run on one device runs the
  // registry's one-device program (host/config/schedule_config.cpp), not the named schedule, so
  // only the name and its knobs are checked there.
  const schedule::ScheduleSpec spec = schedule_spec(*this);
  if (num_devices() > 1) {
    schedule::check_schedule(spec);
  } else {
    schedule::check_schedule_knobs(spec);
  }
  CAROUSEL_CHECK(!(pipeline_fsdp_ag_per_repeat && pipeline_fsdp_ag_once),
                 "pipeline_fsdp_ag_per_repeat and pipeline_fsdp_ag_once are exclusive; choose one");
  CAROUSEL_CHECK(schedule_cost_w <= schedule_cost_b,
                 "schedule_cost_w={} is part of the backward and cannot exceed schedule_cost_b={}",
                 schedule_cost_w, schedule_cost_b);
}

std::int64_t Config::check_microbatch_split() const {
  CAROUSEL_CHECK(global_batch() % microbatches() == 0,
                 "num_pipeline_microbatches={} must divide the global batch {}", microbatches(),
                 global_batch());
  const std::int64_t sequences = global_batch() / microbatches();
  CAROUSEL_CHECK(sequences % (ici_fsdp_parallelism * data_ranks()) == 0,
                 "each microbatch has {} sequences (global batch {} / {} microbatches), which "
                 "ici_fsdp_parallelism x ici_data_parallelism x ici_expert_parallelism = {} x {} "
                 "x {} ranks cannot split evenly; choose a batch or microbatch count that makes "
                 "it a multiple of {}",
                 sequences, global_batch(), microbatches(), ici_fsdp_parallelism,
                 ici_data_parallelism, ici_expert_parallelism, ici_fsdp_parallelism * data_ranks());
  const std::int64_t per_rank = sequences / (ici_fsdp_parallelism * data_ranks());
  // Sequence parallelism: the T ranks of a tensor group each hold 1/T of the microbatch tokens
  // of their context rank.
  const std::int64_t tokens = per_rank * model.max_target_length / ici_context_parallelism;
  CAROUSEL_CHECK(tokens % ici_tensor_parallelism == 0,
                 "a rank's microbatch has {} sequences x max_target_length={} / "
                 "ici_context_parallelism={} = {} tokens, which ici_tensor_parallelism={} ranks "
                 "cannot split evenly (sequence parallelism); choose a max_target_length or batch "
                 "that makes it a multiple of {}",
                 per_rank, model.max_target_length, ici_context_parallelism, tokens,
                 ici_tensor_parallelism, ici_tensor_parallelism);
  return per_rank;
}

}  // namespace carousel
