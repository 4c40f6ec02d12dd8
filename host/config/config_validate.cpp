// config_validate.cpp — Config::validate(): every key's own range first (so a message never
// blames another key), then the rules between keys (batch, divisibility, schedule: the pipeline's
// are in config_validate_pipeline.cpp), then the size limits of one microbatch's activations.
// Each failure names the key, the value and what would be valid.
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "compute/error.h"
#include "host/config/config.h"
#include "host/config/config_limits.h"
#include "host/config/paths.h"
#include "host/config/schedule_config.h"
#include "host/schedule/registry.h"
#include "models/params.h"
#include "models/stage.h"

namespace carousel {

namespace {

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

// Values that change meaning where they are applied: the kernels apply these in float32 (a
// nonzero value float32 rounds to 0 or infinity would be silently 0 or inf: adam_eps=1e-300 made
// every parameter without a gradient 0/0 = NaN), and some scale what they multiply past it
// (routed_scaling_factor=1e308 turned the experts' output into infinities that surfaced later
// as a non-finite embedding gradient). Each key's bound says why.
void check_scales(const Config& c) {
  const ModelConfig& m = c.model;
  // The router's multipliers first, with their own reasons (MoE only; on a dense model
  // config_effect.cpp refuses them set).
  constexpr double kMaxRoutedScale = 1000;
  CAROUSEL_CHECK(m.routed_scaling_factor <= kMaxRoutedScale,
                 "routed_scaling_factor={} is not valid; it must be in (0, {}] (DeepSeek-V3 uses "
                 "2.5): it multiplies every routed expert's output added to the residual "
                 "stream, and far larger factors overflow float32 activations and gradients",
                 m.routed_scaling_factor, kMaxRoutedScale);
  CAROUSEL_CHECK(m.load_balance_loss_weight <= kMaxRoutedScale,
                 "load_balance_loss_weight={} is not valid; it must be in [0, {}] (typical: 0.001 "
                 "to 0.01): it multiplies the balancing loss and its gradient, and far larger "
                 "weights overflow float32 gradients",
                 m.load_balance_loss_weight, kMaxRoutedScale);
  CAROUSEL_CHECK(m.routed_bias_update_rate <= 1,
                 "routed_bias_update_rate={} is not valid; it must be in [0, 1] (DeepSeek-V3 uses "
                 "0.001): each step moves the bias by this much against router scores in [0, 1], "
                 "so a larger rate outweighs every score at once",
                 m.routed_bias_update_rate);
  struct Float32Key {
    const char* key;
    double v;
    bool zero_allowed;
  };
  const Float32Key float32_keys[] = {
      {"learning_rate", c.learning_rate, true},
      {"adam_eps", c.adam_eps, false},
      {"adam_weight_decay", c.adam_weight_decay, true},
      {"gradient_clipping_threshold", c.gradient_clipping_threshold, true},
      {"normalization_layer_epsilon", m.norm_eps, false},
      {"routed_scaling_factor", m.routed_scaling_factor, false},
      {"load_balance_loss_weight", m.load_balance_loss_weight, true},
      {"routed_bias_update_rate", m.routed_bias_update_rate, true}};
  constexpr double lo = std::numeric_limits<float>::min(), hi = std::numeric_limits<float>::max();
  for (const auto& [key, v, zero_allowed] : float32_keys) {
    CAROUSEL_CHECK(v == 0 || (std::abs(v) >= lo && std::abs(v) <= hi),
                   "{}={} is not valid: it is applied in float32, which rounds it to {}; use {}a "
                   "value of magnitude in [1.2e-38, 3.4e38]",
                   key, v, std::abs(v) < lo ? "0" : "infinity", zero_allowed ? "0 or " : "");
  }
  CAROUSEL_CHECK(c.learning_rate * c.adam_weight_decay <= 1,
                 "learning_rate x adam_weight_decay = {} x {} = {} is above 1: AdamW multiplies "
                 "each decayed weight by 1 - {} per step, which must stay in [0, 1]; lower "
                 "either",
                 c.learning_rate, c.adam_weight_decay, c.learning_rate * c.adam_weight_decay,
                 c.learning_rate * c.adam_weight_decay);
  // A transfer's simulated time is bytes / speed, slept on a nanosecond clock: the largest
  // tensor (2^40 elements of 8 bytes) at 1e-6 GB/s takes 8.8e9 s, inside the clock's 9.2e9 s;
  // slower links overflowed it (1e-300 slept not at all: the link was off, not slow).
  constexpr double kMinLink = 1e-6, kMaxLink = 1e6;
  CAROUSEL_CHECK(c.cpu_link_gigabytes_per_second == 0 ||
                     (c.cpu_link_gigabytes_per_second >= kMinLink &&
                      c.cpu_link_gigabytes_per_second <= kMaxLink),
                 "cpu_link_gigabytes_per_second={} is not valid; use 0 (memory speed) or a "
                 "positive speed in [{}, {}] (10^9 bytes/s)",
                 c.cpu_link_gigabytes_per_second, kMinLink, kMaxLink);
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
  // MFU divides by it: a tiny peak made it infinite.
  CAROUSEL_CHECK(peak_flops == 0 || (peak_flops >= 1e6 && peak_flops <= 1e18),
                 "peak_flops={} is not valid; it must be a device's FLOP/s in [1e6, 1e18], or 0 "
                 "(known GPUs by name, measured on CPUs)",
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
  // float8 GEMMs read bfloat16 activations on a GPU (their outputs, the next layer's inputs, are
  // bfloat16 in every anchor); the CPU also runs them on float32 activations, the oracle the
  // mesh tests compare at float32 rounding (docs/float8.md).
  CAROUSEL_CHECK(!model.float8() || dtype == "bfloat16" || device == "cpu",
                 "quantization=fp8 needs dtype=bfloat16 compute on device={} (float8 GEMMs take "
                 "bfloat16 activations), not dtype={}; device=cpu also takes dtype=float32 (the "
                 "float8 oracle)",
                 device, dtype);
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
  check_scales(*this);
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

}  // namespace carousel
