// test_bad_inputs.cpp — one table of bad configs, each of which must end as one carousel::Error
// (never another exception) whose message holds the listed words: the key, the value and what
// would be valid. YAML rows are written to temp files; the last rows run the real `carousel`
// binary and check exit code 2 (not a signal) and the message on stderr.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "compute/error.h"
#include "host/config/config.h"

namespace carousel {
namespace {

struct Row {
  std::vector<std::string> args;  // key=value overrides
  const char* yaml;               // written to a temp file and passed first; nullptr = no file
  std::vector<std::string> expect;
  const char* file = nullptr;  // a config file path instead of yaml
};

const std::vector<Row>& rows() {
  static const std::vector<Row> table = {
      // Wrong types (command line), named with the key, the value and the expected type.
      {{"steps=abc"}, nullptr, {"command line", "'steps'", "'abc'", "integer"}},
      {{"steps=1e99"}, nullptr, {"'steps'", "'1e99'", "integer"}},
      {{"steps=99999999999999999999"}, nullptr, {"'steps'", "out of range"}},
      {{"steps=1.5"}, nullptr, {"'steps'", "'1.5'", "integer"}},
      {{"steps="}, nullptr, {"'steps'", "has no value", "integer"}},
      {{"steps=0x10"}, nullptr, {"'steps'", "'0x10'", "integer"}},
      {{"steps=1__0"}, nullptr, {"'steps'", "'1__0'", "integer"}},
      {{"steps=_10"}, nullptr, {"'steps'", "'_10'", "integer"}},
      {{"steps= 5"}, nullptr, {"'steps'", "' 5'", "integer"}},
      {{"learning_rate=fast"}, nullptr, {"'learning_rate'", "'fast'", "number"}},
      {{"learning_rate=inf"}, nullptr, {"'learning_rate'", "'inf'", "finite"}},
      {{"learning_rate=nan"}, nullptr, {"'learning_rate'", "'nan'", "finite"}},
      {{"learning_rate=-inf"}, nullptr, {"'learning_rate'", "finite"}},
      {{"learning_rate=1e999"}, nullptr, {"'learning_rate'", "'1e999'", "finite"}},
      {{"adam_eps=infinity"}, nullptr, {"'adam_eps'", "finite"}},
      {{"schedule_cost_f=nan"}, nullptr, {"'schedule_cost_f'", "finite"}},
      {{"schedule_cost_p2p=inf"}, nullptr, {"'schedule_cost_p2p'", "finite"}},
      {{"rope_max_timescale=inf"}, nullptr, {"'rope_max_timescale'", "finite"}},
      {{"normalization_layer_epsilon=nan"}, nullptr, {"'normalization_layer_epsilon'", "finite"}},
      {{"collective_timeout_seconds=inf"}, nullptr, {"'collective_timeout_seconds'", "finite"}},
      {{"per_device_batch_size=nan"}, nullptr, {"'per_device_batch_size'", "finite"}},
      {{"enable_checkpointing=maybe"}, nullptr, {"'enable_checkpointing'", "true or false"}},
      {{"logits_via_embedding=yes"}, nullptr, {"'logits_via_embedding'", "'yes'", "true or false"}},
      // Command-line shape.
      {{"steps"}, nullptr, {"'steps'", "not key=value"}},
      {{"=5"}, nullptr, {"'=5'", "not key=value"}},
      {{"leraning_rate=0.1"}, nullptr, {"unknown config key 'leraning_rate'", "'learning_rate'"}},
      {{"step=5"}, nullptr, {"unknown config key 'step'", "did you mean 'steps'"}},
      {{"ici_fsdp_paralelism=2"}, nullptr, {"did you mean 'ici_fsdp_parallelism'"}},
      {{"STEPS=5"}, nullptr, {"unknown config key 'STEPS'", "did you mean 'steps'"}},
      {{"model_name=gpt5"}, nullptr, {"command line", "model_name='gpt5'", "llama2-7b"}},
      // Each key's own range, blamed on that key (not on the batch computed from it).
      {{"ici_fsdp_parallelism=0"}, nullptr, {"ici_fsdp_parallelism=0", "[1, 4096]"}},
      {{"ici_data_parallelism=0"}, nullptr, {"ici_data_parallelism=0", "[1, 4096]"}},
      {{"ici_pipeline_parallelism=-2"}, nullptr, {"ici_pipeline_parallelism=-2", "[1, 4096]"}},
      {{"ici_pipeline_parallelism=0"}, nullptr, {"ici_pipeline_parallelism=0"}},
      {{"ici_data_parallelism=5000"}, nullptr, {"ici_data_parallelism=5000", "[1, 4096]"}},
      {{"ici_data_parallelism=64", "ici_fsdp_parallelism=64", "ici_pipeline_parallelism=32"},
       nullptr,
       {"131072 devices", "at most 65536"}},
      // Tensor parallelism: the split it cannot make, named with the valid values.
      {{"ici_tensor_parallelism=0"}, nullptr, {"ici_tensor_parallelism=0", "[1, 4096]"}},
      {{"ici_tensor_parallelism=3"},
       nullptr,
       {"ici_tensor_parallelism=3 does not divide base_num_query_heads=4",
        "valid values: 1, 2, 4"}},
      {{"ici_tensor_parallelism=2", "base_mlp_dim=171"},
       nullptr,
       {"ici_tensor_parallelism=2 does not divide base_mlp_dim=171", "valid values"}},
      {{"ici_tensor_parallelism=4", "vocab_size=258"},
       nullptr,
       {"ici_tensor_parallelism=4 does not divide vocab_size=258", "valid values: 1, 2, 3, 6"}},
      {{"ici_tensor_parallelism=4", "base_num_query_heads=12", "base_num_kv_heads=3",
        "base_emb_dim=96"},
       nullptr,
       {"ici_tensor_parallelism=4 and base_num_kv_heads=3", "neither holds"}},
      {{"ici_tensor_parallelism=4", "max_target_length=7", "per_device_batch_size=0.25"},
       nullptr,
       {"7 tokens", "ici_tensor_parallelism=4 ranks cannot split evenly", "multiple of 4"}},
      {{"ici_tensor_parallelism=2", "decoder_block=simple"},
       nullptr,
       {"ici_tensor_parallelism=2 needs decoder_block=llama"}},
      // Context parallelism: 2C chunks of whole tokens.
      {{"ici_context_parallelism=0"}, nullptr, {"ici_context_parallelism=0", "[1, 4096]"}},
      {{"ici_context_parallelism=3", "max_target_length=16"},
       nullptr,
       {"ici_context_parallelism=3", "6 chunks", "max_target_length=16", "multiple of 6"}},
      {{"ici_context_parallelism=2", "decoder_block=simple"},
       nullptr,
       {"ici_context_parallelism=2 needs decoder_block=llama"}},
      {{"ici_context_parallelism=2", "ici_tensor_parallelism=4", "max_target_length=4",
        "per_device_batch_size=0.125"},
       nullptr,
       {"/ ici_context_parallelism=2 = 2 tokens", "ici_tensor_parallelism=4 ranks cannot split"}},
      {{"num_pipeline_repeats=0"}, nullptr, {"num_pipeline_repeats=0", "-1", "[1, 4096]"}},
      {{"num_pipeline_repeats=-2"}, nullptr, {"num_pipeline_repeats=-2", "-1"}},
      {{"num_pipeline_microbatches=0"}, nullptr, {"num_pipeline_microbatches=0", "-1"}},
      {{"num_pipeline_microbatches=-5"}, nullptr, {"num_pipeline_microbatches=-5"}},
      {{"num_layers_per_pipeline_stage=0"}, nullptr, {"num_layers_per_pipeline_stage=0"}},
      {{"pipeline_microbatch_group_size=-1"}, nullptr, {"pipeline_microbatch_group_size=-1"}},
      {{"pipeline_prefetch_lookahead=-1"}, nullptr, {"pipeline_prefetch_lookahead=-1"}},
      {{"steps=0"}, nullptr, {"steps=0", "[1, 1000000000000]"}},
      {{"steps=-3"}, nullptr, {"steps=-3"}},
      {{"steps=9223372036854775807"}, nullptr, {"steps=9223372036854775807", "[1,"}},
      {{"log_period=0"}, nullptr, {"log_period=0"}},
      {{"checkpoint_period=-1"}, nullptr, {"checkpoint_period=-1", "0 = only at the end"}},
      {{"learning_rate_schedule_steps=-2"}, nullptr, {"learning_rate_schedule_steps=-2", "-1"}},
      {{"init_weights_seed=-1"}, nullptr, {"init_weights_seed=-1"}},
      {{"per_device_batch_size=0"}, nullptr, {"per_device_batch_size=0", "(0, 65536]"}},
      {{"per_device_batch_size=-1"}, nullptr, {"per_device_batch_size=-1"}},
      {{"per_device_batch_size=1e9"}, nullptr, {"per_device_batch_size=1000000000", "65536"}},
      {{"per_device_batch_size=2.5"}, nullptr, {"per_device_batch_size=2.5", "whole number"}},
      {{"learning_rate=-0.1"}, nullptr, {"learning_rate=-0.1", ">= 0"}},
      {{"adam_b1=1"}, nullptr, {"adam_b1=1", "[0, 1)"}},
      {{"adam_b2=-0.5"}, nullptr, {"adam_b2=-0.5", "[0, 1)"}},
      {{"adam_eps=0"}, nullptr, {"adam_eps=0", "> 0"}},
      {{"adam_weight_decay=-1"}, nullptr, {"adam_weight_decay=-1"}},
      {{"gradient_clipping_threshold=-1"}, nullptr, {"gradient_clipping_threshold=-1"}},
      {{"warmup_steps_fraction=1.5"}, nullptr, {"warmup_steps_fraction=1.5", "[0, 1]"}},
      {{"learning_rate_final_fraction=-0.1"}, nullptr, {"learning_rate_final_fraction=-0.1"}},
      {{"cosine_learning_rate_final_fraction=2"}, nullptr, {"learning_rate_final_fraction=2"}},
      {{"lr_schedule_type=linear"}, nullptr, {"lr_schedule_type='linear'", "cosine or wsd"}},
      {{"wsd_decay_style=exp"}, nullptr, {"wsd_decay_style='exp'", "linear or cosine"}},
      {{"collective_timeout_seconds=0"}, nullptr, {"collective_timeout_seconds=0", "30 days"}},
      {{"collective_timeout_seconds=1e9"}, nullptr, {"collective_timeout_seconds=1000000000"}},
      {{"cpu_link_gigabytes_per_second=-1"},
       nullptr,
       {"cpu_link_gigabytes_per_second=-1", "positive speed"}},
      // Values that overflow (or vanish in) what they scale: each changed meaning silently.
      {{"cpu_link_gigabytes_per_second=1e-300"},
       nullptr,
       {"cpu_link_gigabytes_per_second=1e-300", "[1e-06, 1000000]"}},
      {{"num_experts=4", "routed_scaling_factor=1e308"},
       nullptr,
       {"routed_scaling_factor=1e+308 is not valid", "(0, 1000]"}},
      {{"num_experts=4", "load_balance_loss_weight=1e30"}, nullptr, {"[0, 1000]"}},
      {{"num_experts=4", "routed_bias=true", "routed_bias_update_rate=5"}, nullptr, {"[0, 1]"}},
      {{"adam_eps=1e-300"}, nullptr, {"adam_eps=1e-300", "float32, which rounds it to 0"}},
      {{"learning_rate=1e39"}, nullptr, {"learning_rate=1e+39", "rounds it to infinity"}},
      {{"normalization_layer_epsilon=1e-300"}, nullptr, {"rounds it to 0"}},
      {{"learning_rate=10", "adam_weight_decay=1"},
       nullptr,
       {"learning_rate x adam_weight_decay = 10 x 1 = 10 is above 1"}},
      {{"peak_flops=1e-300"}, nullptr, {"peak_flops=1e-300", "[1e6, 1e18]"}},
      {{"schedule_cost_exchange=-1"}, nullptr, {"schedule_cost_exchange=-1"}},
      {{"schedule_cost_b=-1"}, nullptr, {"schedule_cost_b=-1", "[0,"}},
      {{"schedule_cost_all_gather=-2"}, nullptr, {"schedule_cost_all_gather=-2"}},
      {{"schedule_cost_f=0"}, nullptr, {"schedule_cost_f=0", "> 0"}},
      {{"schedule_cost_reduce_scatter=1e13"},
       nullptr,
       {"schedule_cost_reduce_scatter=10000000000000"}},
      {{"dtype=float16"}, nullptr, {"dtype='float16'", "float32 or bfloat16"}},
      {{"weight_dtype=bfloat16"}, nullptr, {"weight_dtype='bfloat16'"}},
      // float8 (docs/float8.md): the key and recipe named with the valid values, float32
      // compute on a GPU.
      {{"quantization=fp4"}, nullptr, {"quantization='fp4'", "fp8"}},
      {{"quantization=fp8", "fp8_recipe=delayed"},
       nullptr,
       {"fp8_recipe='delayed'", "tensorwise", "not built yet"}},
      {{"quantization=fp8", "fp8_recipe=rowwise"}, nullptr, {"fp8_recipe='rowwise'", "tensorwise"}},
      {{"quantization=fp8", "device=cuda"},
       nullptr,
       {"quantization=fp8 needs dtype=bfloat16", "device=cuda", "dtype=float32"}},
      {{"fp8_recipe=blockwise"}, nullptr, {"fp8_recipe='blockwise'", "tensorwise"}},
      {{"device=gpu"}, nullptr, {"device='gpu'", "cpu, cuda or auto"}},
      {{"remat_policy=some"}, nullptr, {"remat_policy='some'", "use full", "save_qkv_proj"}},
      {{"log_level=loud"}, nullptr, {"log_level='loud'", "trace"}},
      {{"dataset_type=csv"}, nullptr, {"dataset_type='csv'", "synthetic, tokens or text"}},
      {{"dataset_type=tokens"}, nullptr, {"dataset_type=tokens", "dataset_path=FILE"}},
      {{"run_name=a/b"}, nullptr, {"run_name='a/b'", "without '/'"}},
      {{"run_name=.."}, nullptr, {"run_name='..'"}},
      {{"run_name=a\x1b[31mb"}, nullptr, {"run_name=\"a\\x1b[31mb\"", "control character", "0x1b"}},
      {{"decoder_block=gpt"}, nullptr, {"decoder_block='gpt'", "llama or simple"}},
      // Model sizes: zero, negative, huge; the parameter count and activation limits.
      {{"vocab_size=0"}, nullptr, {"vocab_size=0", "[1, 16777216]"}},
      {{"vocab_size=100000000"}, nullptr, {"vocab_size=100000000", "16777216"}},
      {{"base_emb_dim=-64"}, nullptr, {"base_emb_dim=-64", "[1, 65536]"}},
      {{"base_emb_dim=4611686018427387904"}, nullptr, {"base_emb_dim=4611686018427387904"}},
      {{"base_num_decoder_layers=0"}, nullptr, {"base_num_decoder_layers=0"}},
      {{"base_num_decoder_layers=100000"}, nullptr, {"base_num_decoder_layers=100000", "4096"}},
      {{"base_num_query_heads=0"}, nullptr, {"base_num_query_heads=0"}},
      {{"base_num_kv_heads=-1"}, nullptr, {"base_num_kv_heads=-1"}},
      {{"base_mlp_dim=0"}, nullptr, {"base_mlp_dim=0"}},
      {{"base_mlp_dim=4611686018427387904"}, nullptr, {"base_mlp_dim=4611686018427387904"}},
      {{"max_target_length=0"}, nullptr, {"max_target_length=0"}},
      {{"max_target_length=4611686018427387904"},
       nullptr,
       {"max_target_length=4611686018427387904"}},
      {{"rope_max_timescale=0"}, nullptr, {"rope_max_timescale=0", "> 0"}},
      {{"normalization_layer_epsilon=0"}, nullptr, {"normalization_layer_epsilon=0", "(0, 1)"}},
      {{"base_emb_dim=65536", "base_mlp_dim=1048576", "base_num_decoder_layers=4096"},
       nullptr,
       {"parameters", "base_emb_dim=65536", "at most 1000000000000"}},
      {{"max_target_length=1048576"}, nullptr, {"attention scores", "1048576", "2^40"}},
      {{"vocab_size=16777216", "max_target_length=1048576", "base_num_query_heads=1",
        "base_num_kv_heads=1", "per_device_batch_size=1"},
       nullptr,
       {"logits", "vocab_size", "2^40"}},
      // Divisibility rules.
      {{"base_emb_dim=60", "base_num_query_heads=8"}, nullptr, {"base_emb_dim=60", "divisible"}},
      {{"base_emb_dim=12"}, nullptr, {"head_dim", "= 3", "even"}},
      {{"base_num_kv_heads=3"}, nullptr, {"multiple of base_num_kv_heads=3"}},
      {{"ici_pipeline_parallelism=3"}, nullptr, {"base_num_decoder_layers=8", "not divisible"}},
      {{"num_layers_per_pipeline_stage=3"}, nullptr, {"not divisible", "3"}},
      {{"ici_pipeline_parallelism=2", "num_pipeline_repeats=3"},
       nullptr,
       {"2 x 3 x 1", "base_num_decoder_layers=8"}},
      {{"num_pipeline_microbatches=3"}, nullptr, {"num_pipeline_microbatches=3", "divide", "8"}},
      {{"ici_pipeline_parallelism=2", "pipeline_schedule=1f1b", "num_layers_per_pipeline_stage=1"},
       nullptr,
       {"1f1b", "repeats", "set num_layers_per_pipeline_stage = layers / S"}},
      {{"pipeline_schedule=zigzag"}, nullptr, {"zigzag", "circular"}},
      {{"packing=true", "eos_id=300"},
       nullptr,
       {"eos_id=300 is not a token id", "0 to vocab_size-1=255"}},
      {{"pipeline_schedule=interleaved_1f1b", "ici_pipeline_parallelism=2",
        "num_pipeline_microbatches=4", "pipeline_microbatch_group_size=3"},
       nullptr,
       {"M % g == 0"}},
      // A schedule too large to generate and simulate (S = M = 4096 ran for minutes into the
      // memory limit) is refused at once, naming the bound.
      {{"ici_pipeline_parallelism=4096", "num_pipeline_microbatches=4096",
        "base_num_decoder_layers=4096", "num_layers_per_pipeline_stage=1"},
       nullptr,
       {"S x M x R = 4096 x 4096 x 1", "more than the 1048576"}},
      // A knob the chosen schedule would ignore is refused, naming the schedules that use it.
      {{"pipeline_schedule=1f1b", "ici_pipeline_parallelism=2", "num_pipeline_repeats=1",
        "num_layers_per_pipeline_stage=4", "num_pipeline_microbatches=4",
        "pipeline_microbatch_group_size=4"},
       nullptr,
       {"pipeline_microbatch_group_size applies to pipeline_schedule=interleaved_1f1b or "
        "interleaved_zb, not 1f1b"}},
      {{"pipeline_fsdp_ag_per_repeat=true", "pipeline_fsdp_ag_once=true"}, nullptr, {"exclusive"}},
      // Uneven stages: the layout's length (S x R), sum (the layers), each count >= 1, one way.
      {{"pipeline_stage_layers=1,x"}, nullptr, {"'pipeline_stage_layers'", "'x'", "[1, 3]"}},
      {{"pipeline_stage_layers=1,,7"},
       nullptr,
       {"'pipeline_stage_layers'", "'1,,7'", "empty item"}},
      {{"pipeline_stage_layers=[1, 3,]"}, nullptr, {"'[1, 3,]'", "empty item"}},
      {{"ici_pipeline_parallelism=2", "pipeline_stage_layers=[1,3,4]"},
       nullptr,
       {"pipeline_stage_layers=[1, 3, 4]", "3 entries", "2 x 1 = 2 virtual stages"}},
      {{"ici_pipeline_parallelism=2", "num_pipeline_repeats=2", "pipeline_stage_layers=[3,5]"},
       nullptr,
       {"pipeline_stage_layers=[3, 5]", "2 entries", "2 x 2 = 4 virtual stages"}},
      {{"ici_pipeline_parallelism=2", "pipeline_stage_layers=[3,4]"},
       nullptr,
       {"pipeline_stage_layers=[3, 4]", "sums to 7", "base_num_decoder_layers=8"}},
      {{"ici_pipeline_parallelism=2", "pipeline_stage_layers=[0,8]"},
       nullptr,
       {"pipeline_stage_layers=[0, 8]", "virtual stage 0", "0 layers", "between 1"}},
      {{"ici_pipeline_parallelism=2", "pipeline_stage_layers=[-1,9]"},
       nullptr,
       {"virtual stage 0", "-1 layers"}},
      {{"ici_pipeline_parallelism=2", "num_layers_per_pipeline_stage=2",
        "pipeline_stage_layers=[3,5]"},
       nullptr,
       {"num_layers_per_pipeline_stage=2", "pipeline_stage_layers", "keep one"}},
      {{"ici_pipeline_parallelism=2", "pipeline_stage_layers=[3,5]",
        "decoder_first_pipeline_num_layers=3"},
       nullptr,
       {"pipeline_stage_layers=[3, 5]", "decoder_first/last_pipeline_num_layers", "keep one"}},
      {{"ici_pipeline_parallelism=4", "decoder_first_pipeline_num_layers=2",
        "decoder_last_pipeline_num_layers=3"},
       nullptr,
       {"decoder_first_pipeline_num_layers=2", "3 of base_num_decoder_layers=8", "2 other",
        "multiple of 2"}},
      {{"ici_pipeline_parallelism=2", "decoder_first_pipeline_num_layers=1",
        "decoder_last_pipeline_num_layers=1"},
       nullptr,
       {"decoder_first_pipeline_num_layers=1", "2 virtual stage(s)", "raise S or R"}},
      {{"ici_pipeline_parallelism=2", "decoder_last_pipeline_num_layers=0"},
       nullptr,
       {"decoder_last_pipeline_num_layers=0", "between 1 and base_num_decoder_layers=8"}},
      // Layers outside the pipeline: a count in range, stages that split it, a schedule that
      // runs every forward first.
      {{"ici_pipeline_parallelism=2", "pipeline_parallel_layers=0"},
       nullptr,
       {"pipeline_parallel_layers=0", "1 to 8", "-1 for all"}},
      {{"ici_pipeline_parallelism=2", "pipeline_parallel_layers=9"},
       nullptr,
       {"pipeline_parallel_layers=9", "base_num_decoder_layers=8"}},
      {{"ici_pipeline_parallelism=2", "pipeline_parallel_layers=5"},
       nullptr,
       {"pipeline_parallel_layers=5 is not divisible", "2 x 1"}},
      {{"ici_pipeline_parallelism=2", "pipeline_parallel_layers=4", "pipeline_schedule=1f1b"},
       nullptr,
       {"pipeline_parallel_layers", "pipeline_schedule=1f1b", "circular, gpipe or looped_bfs"}},
      {{}, "pipeline_stage_layers: [1, {a: 2}]\n", {"'pipeline_stage_layers'", "a map"}},
      {{"schedule_cost_w=3"}, nullptr, {"schedule_cost_w=3", "schedule_cost_b=2"}},
      {{"dataset_type=text", "dataset_path=x.txt", "vocab_size=100"},
       nullptr,
       {"vocab_size >= 256", "100"}},
      // YAML files: types, line numbers and oddities yaml-cpp would misread silently.
      {{}, "steps: abc\n", {"line 1", "'steps'", "'abc'", "integer"}},
      {{}, "# c\nsteps: [1, 2]\n", {"line 2", "'steps'", "a list"}},
      {{}, "steps: {a: 1}\n", {"line 1", "'steps'", "a map"}},
      {{}, "steps:\n  a: 1\n", {"'steps'", "a map", "flat"}},
      {{}, "learning_rate: .inf\n", {"'learning_rate'", "'.inf'"}},
      {{}, "steps: 1e99\n", {"line 1", "'1e99'", "integer"}},
      {{}, "steps: 3\nsteps: 4\n", {"'steps'", "twice", "lines 1 and 2"}},
      {{}, "pipeline_stage_layers: [\"\", 7]\n", {"pipeline_stage_layers", "entries is empty"}},
      {{}, "run_name: \"abc\nsteps: 5\"\n", {"line 1", "run_name", "unterminated quote"}},
      {{}, "run_name: \"abc\n", {"line 1", "run_name", "does not close"}},
      {{}, "run_name: 'abc\n", {"run_name", "single quote"}},
      {{}, "steps: 3\n---\nsteps: 4\n", {"2 YAML documents", "---"}},
      {{}, "steps: 3\n---\nsteps: 4\n---\nsteps: 5\n", {"more than 2 YAML documents", "line 2"}},
      // yaml-cpp's LoadAll never returned on this (an endless run of empty documents).
      {{}, ",x\n", {"not valid YAML", "line 1, column 1", "cannot get past"}},
      {{}, "- steps\n- 3\n", {"top level is a list"}},
      {{}, "just text\n", {"top level is a single value"}},
      {{}, "[a]: 1\n", {"line 1", "key must be a plain name"}},
      {{}, "steps: 3\n  log_period: 2\n", {"not valid YAML", "line 2"}},
      {{}, "steps: [1, 2\n", {"not valid YAML"}},
      {{}, "stepz: 3\n", {"unknown config key 'stepz'", "line 1", "did you mean 'steps'"}},
      {{}, "steps: 0\n", {"steps=0"}},
      {{}, "model_name: llama9\n", {"line 1", "model_name='llama9'"}},
      {{}, "steps: 3\nrun_name: abc\n  def\n", {"line 3", "part of the value of 'run_name'"}},
      {{},
       "a: [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]\n",
       {"nests brackets deeper"}},
      // Files that are not config files.
      {{}, nullptr, {"'/nonexistent/c.yml'", "does not exist"}, "/nonexistent/c.yml"},
      {{}, nullptr, {"is a directory"}, "/tmp"},
  };
  return table;
}

std::string describe(const Row& r) {
  std::string s = r.yaml ? std::string("yaml: ") + r.yaml : "";
  for (const auto& a : r.args) s += " " + a;
  return s;
}

TEST(BadInputs, TableHasEnoughRows) { EXPECT_GE(rows().size(), 80u); }

TEST(BadInputs, EachIsOneClearCarouselError) {
  int n = 0;
  for (const Row& r : rows()) {
    std::string file = r.file ? r.file : "";
    if (r.yaml) {
      file = (std::filesystem::temp_directory_path() /
              ("carousel_bad_" + std::to_string(::getpid()) + "_" + std::to_string(n) + ".yml"))
                 .string();
      std::ofstream(file) << r.yaml;
    }
    ++n;
    std::string message;
    try {
      load_config(file, r.args);
      ADD_FAILURE() << "no error for " << describe(r);
      continue;
    } catch (const Error& e) {
      message = e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not a carousel::Error for " << describe(r) << ": " << e.what();
      continue;
    }
    for (const auto& word : r.expect) {
      EXPECT_NE(message.find(word), std::string::npos)
          << describe(r) << "\n  message: " << message << "\n  missing: " << word;
    }
    if (r.yaml) {
      EXPECT_NE(message.find(file), std::string::npos) << "names no file: " << message;
      std::filesystem::remove(file);
    }
  }
}

TEST(BadInputs, DigitGroupsAndValidEdgesLoad) {
  EXPECT_EQ(load_config("", {"steps=32_000"}).config.steps, 32000);
  EXPECT_EQ(load_config("", {"steps=+5"}).config.steps, 5);
  EXPECT_EQ(load_config("", {"num_pipeline_repeats=-1"}).config.repeats(), 8);
  EXPECT_DOUBLE_EQ(
      load_config("", {"collective_timeout_seconds=1_000.5"}).config.collective_timeout_seconds,
      1000.5);
  const auto yml = std::filesystem::temp_directory_path() / "carousel_good_edges.yml";
  std::ofstream(yml) << "---\n# comment\nsteps: 7   # trailing comment\nrun_name: 'it''s'\n"
                        "metrics_file: \"a \\\" b\"\n";
  const Config c = load_config(yml.string(), {}).config;
  EXPECT_EQ(c.steps, 7);
  EXPECT_EQ(c.run_name, "it's");
  EXPECT_EQ(c.metrics_file, "a \" b");
}

// The real binary: exit code 2 (not a signal) and the message on stderr.
struct CliRun {
  int status;
  std::string output;
};
// `env`: VAR=value words set for the binary only.
CliRun run_carousel(const std::string& args, const std::string& env = "") {
  const std::string out = (std::filesystem::temp_directory_path() /
                           ("carousel_cli_" + std::to_string(::getpid()) + ".txt"))
                              .string();
  const std::string cmd =
      "env " + env + " " + CAROUSEL_BINARY + " " + args + " >/dev/null 2>" + out;
  const int status = std::system(cmd.c_str());
  std::ifstream in(out);
  CliRun r{status, std::string((std::istreambuf_iterator<char>(in)), {})};
  std::filesystem::remove(out);
  return r;
}

TEST(BadInputs, CarouselTrainExitsWithCode2AndTheMessage) {
  const auto dup = std::filesystem::temp_directory_path() / "carousel_cli_dup.yml";
  std::ofstream(dup) << "steps: 3\nsteps: 4\n";
  const std::pair<std::string, std::string> cases[] = {
      {"train nosuch_config.yml", "config file 'nosuch_config.yml' does not exist"},
      {"train /tmp", "is a directory"},
      {"train steps=abc", "config key 'steps' expects an integer, got 'abc'"},
      {"train max_target_length=4611686018427387904", "max_target_length=4611686018427387904"},
      {"train ici_fsdp_parallelism=0", "ici_fsdp_parallelism=0"},
      {"train learning_rate=nan", "'learning_rate' expects a finite number"},
      {"train " + dup.string(), "set twice (lines 1 and 2)"},
      {"schedule num_pipeline_repeats=0", "num_pipeline_repeats=0"},
      {"train --no-such-flag", "--no-such-flag"},
  };
  for (const auto& [args, words] : cases) {
    const CliRun r = run_carousel(args);
    ASSERT_TRUE(WIFEXITED(r.status)) << args << ": ended by a signal";
    EXPECT_EQ(WEXITSTATUS(r.status), 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(words), std::string::npos) << args << "\n" << r.output;
  }
  std::filesystem::remove(dup);
}

// Launchers' environment read strictly: atoi made WORLD_SIZE=abc and OMPI_COMM_WORLD_SIZE=abc
// one process, and a CAROUSEL_FAULT for a rank the run lacks never fired, both without a word.
TEST(BadInputs, EnvironmentValuesAreParsedStrictlyAgainstTheRun) {
  const std::string run = "train steps=1 enable_checkpointing=false base_output_directory=" +
                          std::filesystem::temp_directory_path().string() + "/carousel_env_runs";
  const std::pair<std::string, std::string> cases[] = {
      {"WORLD_SIZE=abc", "environment variable WORLD_SIZE='abc' is not a number of processes"},
      {"OMPI_COMM_WORLD_SIZE=abc", "OMPI_COMM_WORLD_SIZE='abc' is not a number of processes"},
      {"SLURM_NTASKS=2x", "SLURM_NTASKS='2x' is not a number of processes"},
      {"CAROUSEL_FAULT=stall:rank=3,step=0,action=1,seconds=1",
       "rank=3 does not exist in this run of 1 rank(s)"},
      {"CAROUSEL_FAULT=nan:rank=0,step=0.5", "step=0.5 is not valid; it must be a whole number"},
  };
  for (const auto& [env, words] : cases) {
    const CliRun r = run_carousel(run, env);
    ASSERT_TRUE(WIFEXITED(r.status)) << env << ": ended by a signal";
    EXPECT_EQ(WEXITSTATUS(r.status), 2) << env << "\n" << r.output;
    EXPECT_NE(r.output.find(words), std::string::npos) << env << "\n" << r.output;
  }
}

// `carousel plan`: every bad flag is exit code 2 and one message naming the flag.
TEST(BadInputs, CarouselPlanExitsWithCode2AndTheMessage) {
  const std::string cluster =
      " --devices 8 --peak-tflops 989 --intra-node-bandwidth 450GB/s --inter-node-bandwidth 50";
  const std::pair<std::string, std::string> cases[] = {
      {"plan --model llama9 --device-memory 80GiB --global-batch 64" + cluster,
       "--model='llama9' is neither a model preset (tiny, llama2-7b"},
      {"plan --model llama2-7b --device-memory 80XB --global-batch 64" + cluster,
       "--device-memory='80XB' has an unknown unit 'XB'"},
      {"plan --model llama2-7b --device-memory 8GiB --global-batch 64" + cluster,
       "no candidate fits in 8.0 GiB per device: the smallest needs at least"},
      {"plan --model llama2-7b --device-memory 80GiB --global-batch 64 --global-batch-tokens 4M" +
           cluster,
       "give the global batch once"},
      {"plan --model llama2-7b --device-memory 80GiB --global-batch 64 --dtype float16" + cluster,
       "--dtype=float16 is not valid; use bfloat16 or float32"},
      {"plan --model llama2-7b --device-memory 80GiB --global-batch 64 --devices 12 "
       "--devices-per-node 8 --peak-tflops 989 --intra-node-bandwidth 450 "
       "--inter-node-bandwidth 50",
       "--devices=12 must be a multiple of --devices-per-node=8"},
      {"plan --model llama2-7b --device-memory 80GiB --global-batch 64", "--devices is required"},
      {"plan --model llama2-7b --device-memory 80GiB --global-batch 64 --compute-efficiency 0.5 "
       "--costs-file costs.yml" +
           cluster,
       "--compute-efficiency=0.5 and --costs-file=costs.yml both set how long a layer takes"},
      {"plan --model llama2-7b --device-memory 80GiB --global-batch 64 --costs-file "
       "/nonexistent/schedule_costs.yml" +
           cluster,
       "--costs-file: schedule_costs_file: config file '/nonexistent/schedule_costs.yml' does not "
       "exist"},
      // Each blamed the batch ("no mesh of 8 devices splits a global batch"), or passed.
      {"plan --model tiny --device-memory 80GiB --global-batch 64 --tensor 3" + cluster,
       "--tensor=3 does not divide the 8 devices of a node"},
      {"plan --model tiny --device-memory 80GiB --global-batch 64 --tensor 8" + cluster,
       "--tensor=8: ici_tensor_parallelism=8 does not divide base_num_query_heads=4"},
      {"plan --model tiny --device-memory 80GiB --global-batch 64 --expert 2" + cluster,
       "--expert=2 splits routed experts, and this model has none (num_experts=1)"},
      {"plan --model tiny --device-memory 80GiB --global-batch 64 --compute-efficiency nan" +
           cluster,
       "--compute-efficiency: 'nan' is not a number in (0, 1]"},
      {"plan --model tiny --device-memory 80GiB --global-batch 64 --kernel-latency-us nan" +
           cluster,
       "--kernel-latency-us: 'nan' is not a number in [0, 1000000]"},
      {"plan --model tiny --device-memory 80GiB --global-batch 64 --devices 8 --peak-tflops inf "
       "--intra-node-bandwidth 450GB/s --inter-node-bandwidth 50",
       "--peak-tflops: 'inf' is not a number in (0, 1000000]"},
  };
  for (const auto& [args, words] : cases) {
    const CliRun r = run_carousel(args);
    ASSERT_TRUE(WIFEXITED(r.status)) << args << ": ended by a signal";
    EXPECT_EQ(WEXITSTATUS(r.status), 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(words), std::string::npos) << args << "\n" << r.output;
  }
}

}  // namespace
}  // namespace carousel
