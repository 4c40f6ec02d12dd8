// config_effect.cpp — the rules of config_effect.h: for each configuration that ignores some
// keys, the keys it ignores, the keys that make it so and what would give them effect. Each rule
// was read off the code that uses the key (the data loaders, the checkpointer, the schedule
// lowering, the router, the replica check); a rule that is too broad refuses a working config,
// so each is as narrow as that code.
#include "host/config/config_effect.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <vector>

#include "compute/error.h"

namespace carousel {

namespace {

struct Rule {
  bool ignored;                       // this config ignores `keys`
  std::vector<const char*> keys;      // the keys it ignores
  std::vector<const char*> enablers;  // the keys whose values make it so
  std::string why;                    // "with dataset_type=synthetic (...)"
  std::string fix;                    // "set dataset_type=tokens ..."
};

// Every mesh axis: whether the run has one device, FSDP, replicas ... depends on all of them.
const std::vector<const char*> kMeshKeys = {
    "ici_pipeline_parallelism", "ici_fsdp_parallelism",     "ici_data_parallelism",
    "ici_tensor_parallelism",   "ici_context_parallelism",  "ici_expert_parallelism",
    "dcn_data_parallelism",     "dcn_pipeline_parallelism", "dcn_fsdp_parallelism",
    "dcn_context_parallelism",  "dcn_tensor_parallelism"};

// The mixture-of-experts keys: a dense model reads none of them.
const std::vector<const char*> kExpertKeys = {
    "num_experts_per_tok",     "base_moe_mlp_dim",         "shared_experts",
    "first_num_dense_layers",  "routed_score_func",        "norm_topk_prob",
    "routed_scaling_factor",   "load_balance_loss_weight", "routed_bias",
    "routed_bias_update_rate", "capacity_factor"};

std::vector<const char*> with(std::vector<const char*> keys, std::vector<const char*> more) {
  keys.insert(keys.end(), more.begin(), more.end());
  return keys;
}

std::vector<Rule> rules(const Config& c) {
  const ModelConfig& m = c.model;
  const bool one_device = c.num_devices() == 1;
  const bool replicas = c.data_ranks() * c.ici_context_parallelism > 1 ||
                        (!one_device && c.ici_pipeline_parallelism > 1 &&
                         c.pipelined_layers() < m.num_layers);  // ReplicaCheck::due
  const std::string synthetic = "with dataset_type=synthetic (synthetic data reads no files)";
  return {
      {c.dataset_type == "synthetic",
       {"dataset_path", "eval_dataset_path"},
       {"dataset_type"},
       synthetic,
       "set dataset_type=tokens (llm.c shards) or dataset_type=text"},
      {c.dataset_type == "synthetic",
       {"enable_data_shuffling"},
       {"dataset_type"},
       "with dataset_type=synthetic (each synthetic sequence is drawn from its number: there is "
       "no order to shuffle)",
       "set dataset_type=tokens or text"},
      {c.eval_interval == 0,
       {"eval_dataset_path", "eval_steps"},
       {"eval_interval"},
       "with eval_interval=0 (no evaluation)",
       "set eval_interval=N to evaluate every N steps"},
      {!c.enable_data_shuffling,
       {"data_shuffle_seed"},
       {"enable_data_shuffling"},
       "with enable_data_shuffling=false (sequences are read in order)",
       "set enable_data_shuffling=true"},
      {!c.packing,
       {"eos_id"},
       {"packing"},
       "with packing=false (sequences are not split into documents)",
       "set packing=true"},
      {c.dataset_type != "tokens" && !(c.packing && c.eos_id == -1) && !c.enable_checkpointing,
       {"tokenizer_path"},
       {"dataset_type", "packing", "eos_id", "enable_checkpointing"},
       "in this run: it checks dataset_type=tokens data against vocab_size, gives packing=true "
       "its eos token and is saved with checkpoints, and the run does none of these",
       "set dataset_type=tokens, packing=true or enable_checkpointing=true"},
      {c.lr_schedule_type != "wsd",
       {"wsd_decay_steps_fraction", "wsd_decay_style"},
       {"lr_schedule_type"},
       "with lr_schedule_type=" + c.lr_schedule_type,
       "set lr_schedule_type=wsd"},
      {c.profiler_steps == 0,
       {"skip_first_n_steps_for_profiler"},
       {"profiler_steps"},
       "with profiler_steps=0 (nothing is profiled)",
       "set profiler_steps=N"},
      {!c.enable_checkpointing,
       {"checkpoint_period", "async_checkpointing", "max_num_checkpoints_to_keep"},
       {"enable_checkpointing"},
       "with enable_checkpointing=false (nothing is saved)",
       "set enable_checkpointing=true"},
      {!replicas,
       {"replica_check_interval"},
       with(kMeshKeys, {"pipeline_parallel_layers"}),
       "without copies of the weights to compare (ici_data_parallelism x ici_expert_parallelism "
       "x ici_context_parallelism = 1, and no layers outside the pipeline)",
       "set ici_data_parallelism > 1"},
      {c.ici_data_parallelism * c.ici_context_parallelism == 1,
       {"shard_optimizer_over_data"},
       {"ici_data_parallelism", "dcn_data_parallelism", "ici_context_parallelism",
        "dcn_context_parallelism"},
       "with one data replica (ici_data_parallelism x ici_context_parallelism = 1: no ranks to "
       "shard the optimizer state over)",
       "set ici_data_parallelism > 1"},
      {c.ici_fsdp_parallelism == 1,
       {"pipeline_fsdp_ag_per_repeat", "pipeline_fsdp_ag_once", "pipeline_prefetch_lookahead",
        "schedule_cost_all_gather", "schedule_cost_reduce_scatter"},
       {"ici_fsdp_parallelism", "dcn_fsdp_parallelism"},
       "with ici_fsdp_parallelism=1 (no FSDP: every rank holds its stages' weights, nothing is "
       "gathered or reduce-scattered)",
       "set ici_fsdp_parallelism > 1"},
      {one_device,
       {"cpu_link_gigabytes_per_second"},
       kMeshKeys,
       "on one device (there is no other rank to link to)",
       "run several devices (ici_*_parallelism) to simulate the link between them"},
      {one_device,
       {"pipeline_schedule", "num_layers_per_pipeline_stage", "num_pipeline_repeats",
        "pipeline_stage_layers", "decoder_first_pipeline_num_layers",
        "decoder_last_pipeline_num_layers", "pipeline_parallel_layers",
        "pipeline_microbatch_group_size"},
       kMeshKeys,
       "on one device (it runs the whole model as one stage, its microbatches in turn)",
       "set ici_pipeline_parallelism > 1 for a pipeline"},
      {c.ici_pipeline_parallelism == 1,
       {"schedule_cost_p2p"},
       {"ici_pipeline_parallelism", "dcn_pipeline_parallelism"},
       "with ici_pipeline_parallelism=1 (no activations pass between stages)",
       "set ici_pipeline_parallelism > 1"},
      {!m.is_moe(),
       kExpertKeys,
       {"num_experts"},
       "on a dense model (num_experts=1: no layer routes tokens to experts)",
       "set num_experts > 1 for a mixture of experts"},
      {m.is_moe() && m.first_num_dense_layers >= m.num_layers,
       {"num_experts"},
       {"first_num_dense_layers", "base_num_decoder_layers", "model_name"},
       fmt::format("with first_num_dense_layers={} of base_num_decoder_layers={} (every layer "
                   "keeps its dense MLP)",
                   m.first_num_dense_layers, m.num_layers),
       fmt::format("set first_num_dense_layers below {}", m.num_layers)},
      {!m.float8(),
       {"fp8_recipe"},
       {"quantization"},
       "without quantization=fp8 (no GEMM runs in float8)",
       "set quantization=fp8"},
      {m.is_moe() && !m.routed_bias,
       {"routed_bias_update_rate"},
       {"routed_bias"},
       "with routed_bias=false (there is no bias to update)",
       "set routed_bias=true"},
      {c.ici_expert_parallelism == 1,
       {"schedule_cost_exchange"},
       {"ici_expert_parallelism"},
       "with ici_expert_parallelism=1 (no rows are exchanged with expert ranks)",
       "set ici_expert_parallelism > 1"},
      {!m.is_llama(),
       {"base_num_query_heads", "base_num_kv_heads", "base_mlp_dim", "rope_max_timescale",
        "normalization_layer_epsilon", "logits_via_embedding"},
       {"decoder_block"},
       "with decoder_block=simple (one matrix per layer: no attention, MLP, norms or embedding)",
       "set decoder_block=llama"},
      {c.device == "cpu",
       {"gpu_kernels"},
       {"device"},
       "with device=cpu (the CPU has one set of kernels; rehearse_gpu_kernels imitates the fast "
       "tier)",
       "set device=cuda (or auto on a machine with a GPU)"},
  };
}

// "key=value", strings quoted as validation writes them.
std::string setting(const ConfigKey& k, const Config& c) {
  return k.type == "string" ? fmt::format("{}='{}'", k.name, k.get(c))
                            : fmt::format("{}={}", k.name, k.get(c));
}

const ConfigKey& key_named(const std::string& name) {
  for (const ConfigKey& k : config_keys()) {
    if (k.name == name) return k;
  }
  CAROUSEL_ASSERT(false, "config_effect.cpp names '{}', which is not a config key", name);
}

}  // namespace

void check_keys_have_effect(const Config& cfg, const std::map<std::string, GivenKey>& given) {
  Config defaults;  // what each key is when nobody sets it: the model keys of its preset
  defaults.model_name = cfg.model_name;
  defaults.model = model_preset(cfg.model_name);
  for (const Rule& rule : rules(cfg)) {
    if (!rule.ignored) continue;
    // The latest source that set a key taking the effect away (0: none, the defaults did).
    const GivenKey* disabler = nullptr;
    std::string disabler_key;
    for (const char* e : rule.enablers) {
      const auto it = given.find(e);
      if (it != given.end() && (!disabler || it->second.layer > disabler->layer)) {
        disabler = &it->second;
        disabler_key = e;
      }
    }
    for (const char* name : rule.keys) {
      const auto it = given.find(name);
      const ConfigKey& k = key_named(name);
      if (it == given.end() || k.get(cfg) == k.get(defaults)) continue;
      if (!disabler || it->second.layer >= disabler->layer) {
        fail("{} has no effect {}; {}, or remove {}", setting(k, cfg), rule.why, rule.fix, name);
      }
      spdlog::warn("{} ({}) has no effect {}, as {} ({}) makes it; ignored", setting(k, cfg),
                   it->second.where, rule.why, setting(key_named(disabler_key), cfg),
                   disabler->where);
    }
  }
}

}  // namespace carousel
