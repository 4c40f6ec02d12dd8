// config.h — every run setting, with MaxText's key names, in one table.
//
// The table (config_keys()) is the single source of truth for each key's name, type, default,
// help text and parsing: the CLI, YAML files, the printed config table, checkpoints and
// docs/config.md all derive from it. A run's config is built as
//   defaults -> preset of model_name -> YAML file keys -> command-line key=value
// and then validated; every mistake is one error naming the key, the value and what is valid.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "models/model_config.h"

namespace carousel {

// The longest collective_timeout_seconds accepted (30 days): deadlines stay representable.
inline constexpr double kMaxCollectiveTimeoutSeconds = 30 * 24 * 3600.0;

struct Config {
  std::string model_name = "tiny";
  ModelConfig model = model_preset("tiny");

  // Run and outputs.
  std::string run_name;  // empty: a new <model_name>_<time> directory (host/config/run_name.h)
  std::string base_output_directory = "out";
  std::int64_t steps = 200;
  std::int64_t log_period = 1;
  std::string metrics_file;  // default <base_output_directory>/<run_name>/metrics.jsonl
  bool enable_tensorboard = true;  // event files in <run directory>/tensorboard/
  std::string log_level = "info";
  std::string progress_bar = "auto";  // auto | always | never (host/report/progress_bar.h)
  std::int64_t profiler_steps = 0;    // measured trace of this many steps
  double peak_flops = 0;              // per device, for MFU; 0 = known or measured
  std::int64_t skip_first_n_steps_for_profiler = 1;  // MaxText's name

  // Pipeline (MaxText names; see docs/circular-pipeline.md and docs/schedules.md).
  std::int64_t ici_pipeline_parallelism = 1;       // S, pipeline stages (ranks in the ring)
  std::int64_t num_pipeline_microbatches = -1;     // M; -1 = S (2S with the forwarding delay)
  std::int64_t num_pipeline_repeats = -1;          // R; -1 = derived, see repeats()
  std::int64_t num_layers_per_pipeline_stage = 1;  // L
  // Uneven stages (docs/schedules.md#uneven-stages): layers per virtual stage, S x R entries in
  // stage order; empty = L each. Megatron's sugar: the first / last virtual stage's layers, the
  // rest split evenly; -1 = unset.
  std::vector<std::int64_t> pipeline_stage_layers;
  std::int64_t decoder_first_pipeline_num_layers = -1;
  std::int64_t decoder_last_pipeline_num_layers = -1;
  // MaxText's pipeline_parallel_layers: the pipeline runs decoder layers [0, P), the rest run after
  // it on every stage rank, the stage axis then splitting the microbatches like data parallelism
  // (docs/pipeline.md#layers-outside-the-pipeline-pipeline_parallel_layers); -1 = all pipelined.
  std::int64_t pipeline_parallel_layers = -1;
  std::string pipeline_schedule = "circular";
  bool pipeline_delay_activation_forwarding = false;
  std::int64_t pipeline_microbatch_group_size = 0;  // interleaved_1f1b g; 0 = S
  std::int64_t ici_fsdp_parallelism = 1;            // F
  std::int64_t ici_data_parallelism = 1;            // D, data-parallel replicas
  std::int64_t ici_tensor_parallelism = 1;          // T, heads and MLP columns split
  std::int64_t ici_context_parallelism = 1;         // C, each sequence split
  std::int64_t ici_expert_parallelism = 1;          // E, routed experts split (docs/moe.md)
  // MaxText's factors across nodes (slices) of each axis: the axis is ici x dcn. load_config
  // folds them into the ici_* degrees (and sets these back to 1), checking that carousel's rank
  // order puts every node's ici factors innermost (docs/config.md#mesh-axes-across-nodes).
  std::int64_t dcn_data_parallelism = 1, dcn_pipeline_parallelism = 1, dcn_fsdp_parallelism = 1,
               dcn_context_parallelism = 1, dcn_tensor_parallelism = 1;
  bool shard_optimizer_over_data = false;           // ZeRO-1 over the D replicas
  std::int64_t replica_check_interval = 100;        // compare replicas' bits (0 = off)
  bool pipeline_fsdp_ag_per_repeat = false;         // Buffer Sliding Window: 2 weight slots
  bool pipeline_fsdp_ag_once = false;               // every local stage resident for the step
  std::int64_t pipeline_prefetch_lookahead = 0;     // 0 = as soon as a weight slot is free
  double collective_timeout_seconds = 300;          // a collective waiting longer is an error
  double cpu_link_gigabytes_per_second = 0;         // simulated link between thread ranks; 0: none
  // Cost model of `carousel schedule`, per layer (a stage costs L times these).
  double schedule_cost_f = 1, schedule_cost_b = 2, schedule_cost_w = 1;
  double schedule_cost_p2p = 0, schedule_cost_all_gather = 0, schedule_cost_reduce_scatter = 0;
  std::string schedule_costs_file;  // schedule_cost_* keys measured by a run (schedule_costs.yml)
  double schedule_cost_head = 0;    // the head's compute in layers, added to the last stage
  double schedule_cost_exchange = 0;  // one expert exchange (MoE rows all-to-all; E > 1)

  // Batch and precision.
  double per_device_batch_size = 8;
  std::string dtype = "float32";         // compute: float32 | bfloat16 (mixed precision)
  std::string weight_dtype = "float32";  // master weights, gradients, AdamW moments
  std::string device = "cpu";            // cpu | cuda | auto (cuda when a GPU is visible)
  std::string gpu_kernels = "fast";      // fast | reference (CUDA kernel tier)
  bool rehearse_gpu_kernels = false;     // CPU devices follow the GPU fast tier's dtype rules
  std::string step_graphs = "auto";      // on | off | auto (on for GPUs): captured steps
  std::string remat_policy = "full";
  std::int64_t init_weights_seed = 0;
  std::int64_t head_dim = -1;  // -1 = E/H (derived); any other value must equal E/H

  // Optimizer (AdamW, PyTorch semantics) and schedule (MaxText: warmup, then cosine decay or
  // warmup-stable-decay).
  double learning_rate = 1e-3;
  double adam_b1 = 0.9;
  double adam_b2 = 0.95;
  double adam_eps = 1e-8;
  double adam_weight_decay = 0.1;
  double gradient_clipping_threshold = 1.0;
  bool skip_step_on_nonfinite = false;  // skip (not stop at) a step with a NaN/inf loss or norm
  double warmup_steps_fraction = 0.1;
  std::string lr_schedule_type = "cosine";  // cosine | wsd
  double learning_rate_final_fraction =
      0.1;                                 // MaxText's former cosine_learning_rate_final_fraction
  double wsd_decay_steps_fraction = 0.1;   // wsd: decay over this last fraction of the schedule
  std::string wsd_decay_style = "linear";  // wsd: linear | cosine
  std::int64_t learning_rate_schedule_steps = -1;  // -1 = steps

  // Data.
  std::string dataset_type = "synthetic";  // synthetic | tokens | text
  std::string dataset_path;          // a file or glob, or PATH[,WEIGHT] entries separated by ';'
  bool enable_data_shuffling = false;  // each dataset's windows in a permutation per epoch
  bool packing = false;      // documents end with eos_id: attention and RoPE positions per document
  std::int64_t eos_id = -1;  // -1: tokenizer_path's eos token (resolve_eos_id)
  std::int64_t data_shuffle_seed = 0;
  std::string tokenizer_path;  // tokenizer.json of the tokens; its vocab must fit vocab_size
  // Held-out evaluation (host/data/data.h make_eval_data_loader): every eval_interval steps (0 =
  // off), eval_steps batches (-1 = one pass over the eval split) of eval_dataset_path.
  std::int64_t eval_interval = 0;
  std::int64_t eval_steps = -1;
  std::string eval_dataset_path;

  // Checkpoints.
  bool enable_checkpointing = true;
  std::int64_t checkpoint_period = 0;  // 0 = only at the end
  std::int64_t max_num_checkpoints_to_keep = 0;  // 0 = all; else the newest N complete ones
  bool async_checkpointing = true;  // rank 0 writes while the ranks train on (one in flight)
  std::string load_parameters_path;    // a checkpoint step directory to start from

  // Derived values.
  std::int64_t num_devices() const {
    return data_ranks() * ici_pipeline_parallelism * ici_fsdp_parallelism *
           ici_tensor_parallelism * ici_context_parallelism;
  }
  // The ranks a stage's batch is split over besides FSDP: the D data replicas, each of E expert
  // ranks, which hold the same dense weights and different routed experts (docs/moe.md).
  std::int64_t data_ranks() const { return ici_data_parallelism * ici_expert_parallelism; }
  std::int64_t microbatches() const;  // M after MaxText's defaulting
  std::int64_t repeats() const;       // R after defaulting
  bool uneven_stages() const;         // pipeline_stage_layers or the Megatron keys are set
  // The decoder layers the pipeline's stages split: pipeline_parallel_layers, or all of them.
  std::int64_t pipelined_layers() const;
  // Layers of each of the S x R virtual stages in stage order (valid after validate_pipeline).
  std::vector<int> stage_layer_counts() const;
  int weight_slots() const;           // 0 default, 2 with ag_per_repeat, -1 with ag_once
  std::int64_t global_batch() const;  // B = per_device_batch_size * devices
  std::int64_t schedule_steps() const {
    return learning_rate_schedule_steps < 0 ? steps : learning_rate_schedule_steps;
  }
  std::string run_directory() const;  // <base_output_directory>/<run_name>; run_name must be set
  void validate() const;
  void validate_pipeline() const;  // S, M, R, L, the schedule (registry) and FSDP/BSW knobs
  // The global batch splits into M microbatches, each evenly over the F x D ranks of a stage
  // (validate() asks, train() again for configs built without load_config, and the planner);
  // returns the sequences of a microbatch on one rank, B / (M x F x D).
  std::int64_t check_microbatch_split() const;
};

// What a key's change means when a run resumes from a checkpoint saved with another value
// (host/run/checkpointer.cpp reads this column; docs/config.md lists it).
enum class ResumeClass {
  Model,       // the model's shape (set by model_name presets): a resumed run keeps it (an error)
  Layout,      // how the work is split over devices and in time (mesh, schedule, batch split,
               // remat, device): checkpoints are layout-free (said)
  RunControl,  // how long, where and how visibly the run goes, and predictions: free to change
  Training,    // the arithmetic of training (data, optimizer, precision, init): a warning
};
const char* resume_class_name(ResumeClass c);  // "model", "layout", "run-control", "training"

// One key of the table.
struct ConfigKey {
  std::string name;
  std::string type;  // int | float | bool | string | [int] (a list)
  std::string help;
  ResumeClass resume;
  std::function<std::string(const Config&)> get;
  std::function<void(Config&, const std::string&)> set;  // throws on a bad value
};
const std::vector<ConfigKey>& config_keys();

// Where a key's value came from, for the printed table.
struct ConfigValueSource {
  std::string key, value, source;  // source: default | preset | file | command line
};

struct LoadedConfig {
  Config config;
  std::vector<ConfigValueSource> table;  // every key in table order
};

// Builds a config from an optional YAML file (flat `key: value` map) and key=value overrides.
LoadedConfig load_config(const std::string& yaml_path, const std::vector<std::string>& overrides);
// Several config files, each read with its base_config chain (bases first); a later file's keys
// override an earlier one's, and the overrides override them all.
LoadedConfig load_config(const std::vector<std::string>& yaml_paths,
                         const std::vector<std::string>& overrides);

// Closest known key to `name` when it is a plausible typo (edit distance at most a third of the
// name's length, case-insensitive), else "" (no hint: a far-off suggestion misleads).
std::string closest_key(const std::string& name);

// Old MaxText key names carousel still reads, each with its current name (a warning says so).
struct ConfigAlias {
  const char* old_name;
  const char* new_name;
};
const std::vector<ConfigAlias>& config_aliases();

// True for a MaxText config key carousel does not implement (attention, quantization,
// scan_layers, ...): such a key is refused with "MaxText key 'K' is not supported by carousel".
bool is_unsupported_maxtext_key(const std::string& name);
// For such a key with a carousel counterpart, what to write instead ("" when none):
// gradient_accumulation_steps -> num_pipeline_microbatches, profiler -> profiler_steps,
// hardware -> device, ici_sequence_parallelism -> ici_context_parallelism, ...
std::string maxtext_equivalent(const std::string& name);

}  // namespace carousel
