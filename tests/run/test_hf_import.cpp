// test_hf_import.cpp — load_parameters_path on Hugging Face Llama directories written by an
// independent writer (tests/end_to_end/write_hf_llama.py: standard-library Python, safetensors by
// hand): single file and shards, F32 / BF16 / F16, and the errors for a config that does not match,
// a missing tensor, a missing shard and a corrupt file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "compute/bfloat16.h"
#include "compute/cpu_backend.h"
#include "host/config/config.h"
#include "host/io/checkpoint.h"
#include "host/io/huggingface/hf_architectures.h"
#include "host/io/huggingface/hf_import.h"
#include "host/report/logging.h"
#include "host/run/trainer.h"

namespace carousel {
namespace {

namespace fs = std::filesystem;

// One directory per process: ctest runs each test case as its own process, two at a time.
const fs::path kRoot =
    fs::temp_directory_path() / "carousel_hf_import_tests" / std::to_string(::getpid());

struct RemoveRoot : ::testing::Environment {
  void TearDown() override { fs::remove_all(kRoot); }
};
[[maybe_unused]] const auto* const kRemoveRoot =
    ::testing::AddGlobalTestEnvironment(new RemoveRoot);

Config small_run(const std::string& run, std::int64_t steps) {
  init_logging({.rank = 0, .level = "warn", .file_dir = {}});
  Config c = load_config("", {"base_num_decoder_layers=2", "max_target_length=32",
                              "per_device_batch_size=4", "num_pipeline_microbatches=2"})
                 .config;
  c.steps = steps;
  c.base_output_directory = kRoot.string();
  c.run_name = run;
  c.dataset_type = "text";
  c.dataset_path = CAROUSEL_TEST_DATA_DIR "/tiny_corpus.txt";
  fs::remove_all(c.run_directory());
  return c;
}

// Our checkpoint of trained (not initial) weights, made once: checkpoints/2 of a 2-step run.
const std::string& our_checkpoint() {
  static const std::string dir = [] {
    const Config base = small_run("base", 2);
    train(base);
    return (fs::path(base.run_directory()) / "checkpoints/2").string();
  }();
  return dir;
}

// Runs tests/end_to_end/write_hf_llama.py on `checkpoint` into a fresh directory named `name`.
std::string write_hf(const std::string& name, const std::string& args,
                     const std::string& checkpoint = our_checkpoint()) {
  const fs::path out = kRoot / "hf" / name;
  fs::remove_all(out);
  const std::string cmd = "python3 " CAROUSEL_SOURCE_DIR "/tests/end_to_end/write_hf_llama.py '" +
                          checkpoint + "' '" + out.string() + "' " + args;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return out.string();
}

// Step 0's loss of a run that starts from `dir`.
double first_loss(const std::string& dir) {
  Config c = small_run("from_" + fs::path(dir).filename().string(), 1);
  c.enable_checkpointing = false;
  c.load_parameters_path = dir;
  return train(c).steps.at(0).loss;
}

// Every parameter as load_parameters reads it from `dir`.
std::vector<float> loaded(const std::string& dir, const ModelConfig& model) {
  CpuBackend be;
  const ParamSet params = ParamSet::allocate(be, param_table(model), DType::F32);
  load_parameters(be, model, dir, params);
  return be.to_host<float>(params.flat);
}

ModelConfig run_model() { return small_run("model", 1).model; }

std::string load_error(const std::string& dir, const ModelConfig& model = run_model()) {
  try {
    loaded(dir, model);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(HfImport, Float32GivesTheStepZeroLossOfOurCheckpointBitwise) {
  const double ours = first_loss(our_checkpoint());
  const std::vector<float> ours_params = loaded(our_checkpoint(), run_model());
  for (const char* args : {"--dtype f32", "--dtype f32 --shards 3"}) {
    const std::string dir =
        write_hf(std::string("f32") + (contains(args, "shards") ? "_3" : ""), args);
    EXPECT_EQ(loaded(dir, run_model()), ours_params) << args;
    EXPECT_EQ(first_loss(dir), ours) << args;
  }
  EXPECT_TRUE(fs::exists(kRoot / "hf/f32_3/model-00003-of-00003.safetensors"));
}

// The rounded weights, widened exactly: the same values (and loss) as the writer's own rounding
// stored as float32, and the loss within the rounding of the float32 run's.
TEST(HfImport, Bfloat16AndFloat16LoadTheRoundedWeightsExactly) {
  const double f32 = first_loss(our_checkpoint());
  const std::vector<float> f32_params = loaded(our_checkpoint(), run_model());
  struct Case {
    const char* name;
    const char* args;
    double tolerance;
  };
  for (const Case& c :
       {Case{"bf16", "--dtype bf16", 1e-2}, Case{"bf16_2", "--dtype bf16 --shards 2", 1e-2},
        Case{"f16", "--dtype f16", 1e-3}, Case{"f16_3", "--dtype f16 --shards 3", 1e-3}}) {
    const std::string dir = write_hf(c.name, c.args);
    const std::string ref =
        write_hf(std::string(c.name) + "_ref", std::string(c.args) + " --rounded-f32");
    const std::vector<float> params = loaded(dir, run_model());
    EXPECT_EQ(params, loaded(ref, run_model())) << c.name;
    if (contains(c.args, "bf16")) {  // also our own rounding (compute/bfloat16.h) agrees
      for (std::size_t i = 0; i < params.size(); ++i) {
        ASSERT_EQ(params[i], math::to_float(math::to_bf16(f32_params[i]))) << c.name << " " << i;
      }
    }
    EXPECT_NE(params, f32_params) << c.name;  // really rounded
    const double loss = first_loss(dir);
    EXPECT_EQ(loss, first_loss(ref)) << c.name;
    EXPECT_NEAR(loss, f32, c.tolerance * f32) << c.name;
  }
}

TEST(HfImport, TiedEmbeddingsNeedNoLmHead) {
  Config c = small_run("tied", 1);
  c.model.logits_via_embedding = true;
  CpuBackend be;
  const ParamSet params = ParamSet::allocate(be, param_table(c.model), DType::F32);
  init_params(be, params, 3);
  const std::string ckpt = save_checkpoint(be, c, {&params, nullptr, nullptr}, {0}, nullptr);
  const std::string dir = write_hf("tied", "", ckpt);
  EXPECT_FALSE(contains(load_error(dir, c.model), "lm_head"));
  EXPECT_EQ(loaded(dir, c.model), be.to_host<float>(params.flat));
  // The untied run is told which key to set.
  EXPECT_TRUE(contains(load_error(dir, run_model()),
                       "tie_word_embeddings=true but logits_via_embedding=false: set "
                       "logits_via_embedding=true"));
}

// The error of a one-step run named `run` that starts from the HF directory `dir` ("" if none).
std::string error_starting_from(const std::string& dir, const std::string& run) {
  Config c = small_run(run, 1);
  c.enable_checkpointing = false;
  c.load_parameters_path = dir;
  try {
    train(c);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A config.json that does not name its architecture is refused, not read as a Llama.
TEST(HfImport, AConfigWithoutModelTypeIsRefused) {
  const std::string dir = write_hf("no_model_type", "--unset model_type");
  const std::string msg = error_starting_from(dir, "no_model_type");
  EXPECT_TRUE(contains(msg, "model_type is missing")) << msg;
}

TEST(HfImport, ConfigMismatchIsOneErrorNamingEveryKeyToSet) {
  const std::string dir = write_hf("mismatch",
                                   "--set hidden_size=128 --set rope_theta=500000.0 --unset "
                                   "num_key_value_heads --set rms_norm_eps=1e-06");
  std::string msg = error_starting_from(dir, "mismatch");
  EXPECT_TRUE(contains(msg, "config.json does not match this run")) << msg;
  EXPECT_TRUE(contains(msg, "hidden_size=128 but base_emb_dim=64: set base_emb_dim=128")) << msg;
  EXPECT_TRUE(contains(msg,
                       "rope_theta=500000 but rope_max_timescale=10000: set "
                       "rope_max_timescale=500000"))
      << msg;
  // Absent num_key_value_heads is num_attention_heads (LlamaConfig's default).
  EXPECT_TRUE(contains(msg, "num_key_value_heads=4 but base_num_kv_heads=2")) << msg;
  EXPECT_TRUE(contains(msg, "rms_norm_eps=1e-06 but normalization_layer_epsilon=1e-05")) << msg;
  EXPECT_TRUE(contains(msg,
                       "(all on the command line: base_emb_dim=128 base_num_kv_heads=4 "
                       "normalization_layer_epsilon=1e-06 rope_max_timescale=500000)"))
      << msg;

  const std::string arch =
      write_hf("arch",
               "--set head_dim=32 --set hidden_act='\"gelu\"' --set "
               "'rope_scaling={\"rope_type\":\"llama3\",\"factor\":8.0}' --set mlp_bias=true");
  msg = load_error(arch);
  for (const char* part :
       {"not supported: head_dim=32", "not supported: hidden_act=\"gelu\"",
        "not supported: rope_scaling of type llama3", "not supported: mlp_bias=true"}) {
    EXPECT_TRUE(contains(msg, part)) << part << "\n" << msg;
  }
}

TEST(HfImport, MissingTensorsAreNamed) {
  for (const char* shards : {"", "--shards 2"}) {
    const std::string dir =
        write_hf("missing", std::string("--drop model.layers.1.mlp.up_proj.weight --drop "
                                        "model.norm.weight ") +
                                shards);
    const std::string msg = load_error(dir);
    EXPECT_TRUE(contains(msg,
                         "lacks 2 tensor(s) the model needs: model.layers.1.mlp.up_proj.weight, "
                         "model.norm.weight"))
        << msg;
  }
}

// Non-finite weights are refused at the door, naming the file, the tensor, the first bad value's
// index and the count — in float32, bfloat16 and float16 files alike (before, they loaded and
// step 1 blamed whichever gradient overflowed first).
TEST(HfImport, NonFiniteWeightsAreRefusedNamingTheTensor) {
  const std::string name = "model.layers.1.mlp.up_proj.weight";
  for (const char* dtype : {"f32", "bf16", "f16"}) {
    // Element 70 of a [mlp, emb] tensor: row 70 / emb, column 70 % emb.
    const std::string dir =
        write_hf(std::string("nan_") + dtype, std::string("--dtype ") + dtype + " --poke " + name +
                                                  "=70=nan --poke " + name + "=71=inf");
    const std::string msg = load_error(dir);
    const ModelConfig m = run_model();
    const std::string at = fmt::format("holds nan at [{}, {}] (2 non-finite values of {})",
                                       70 / m.emb_dim, 70 % m.emb_dim, m.mlp_dim * m.emb_dim);
    EXPECT_TRUE(contains(msg, "tensor '" + name + "'") && contains(msg, at) &&
                contains(msg, "model.safetensors"))
        << dtype << ": " << msg;
  }
}

TEST(HfImport, MissingShardAndCorruptFileAreNamed) {
  const std::string dir = write_hf("no_shard", "--shards 3 --remove-shard 2");
  std::string msg = load_error(dir);
  EXPECT_TRUE(contains(msg, "'model-00002-of-00003.safetensors', which does not exist")) << msg;

  const std::string cut = write_hf("truncated", "--dtype bf16");
  const fs::path file = fs::path(cut) / "model.safetensors";
  fs::resize_file(file, fs::file_size(file) - 10);
  msg = load_error(cut);
  EXPECT_TRUE(contains(msg, file.string())) << msg;
  EXPECT_TRUE(contains(msg, "truncated")) << msg;

  const fs::path neither = kRoot / "hf/neither";
  fs::remove_all(neither);
  fs::create_directories(neither);
  std::ofstream(neither / "weights.bin") << "x";
  msg = load_error(neither.string());
  EXPECT_TRUE(contains(msg,
                       "neither a carousel checkpoint (manifest.json) nor a Hugging Face "
                       "model directory"))
      << msg;
  std::ofstream(neither / "config.json") << "{}";
  msg = load_error(neither.string());
  EXPECT_TRUE(contains(msg,
                       "has config.json but neither model.safetensors nor "
                       "model.safetensors.index.json"))
      << msg;
}

TEST(HfImport, OurIncompleteCheckpointKeepsItsError) {
  // Config.json + model.safetensors + state.json without a manifest is our interrupted save,
  // not a Hugging Face directory.
  const fs::path dir = kRoot / "hf/incomplete";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy(our_checkpoint(), dir, fs::copy_options::recursive);
  fs::remove(dir / "manifest.json");
  const std::string msg = load_error(dir.string());
  EXPECT_TRUE(contains(msg, "manifest.json is missing")) << msg;
}

// A mixture-of-experts run: 4 experts of base_mlp_dim, top-2 renormalised, in every layer — a
// model Mixtral's config can describe as well as DeepSeekMoE's.
Config moe_run(const std::string& run, std::int64_t steps) {
  Config c = small_run(run, steps);
  c.model.num_experts = 4;
  c.model.num_experts_per_tok = 2;
  c.model.norm_topk_prob = true;
  c.validate();
  return c;
}

// Our MoE checkpoint's config.json is DeepSeekMoE's; the writer re-writes the checkpoint as a
// DeepseekForCausalLM directory (the same names) and as a MixtralForCausalLM one (every router and
// expert renamed block_sparse_moe.*): both load the checkpoint's weights bitwise and train from
// them to the same first loss. Its config alone gives the model (carousel plan --model).
TEST(HfImport, MixtureOfExpertsLoadAsDeepSeekMoeAndAsMixtral) {
  const Config base = moe_run("moe_base", 2);
  train(base);
  const std::string checkpoint = (fs::path(base.run_directory()) / "checkpoints/2").string();
  std::ifstream config_file(fs::path(checkpoint) / "config.json");
  const std::string config((std::istreambuf_iterator<char>(config_file)), {});
  EXPECT_TRUE(contains(config, "\"model_type\": \"deepseek\"")) << config;
  EXPECT_TRUE(contains(config, "\"n_routed_experts\": 4")) << config;
  const std::vector<float> ours = loaded(checkpoint, base.model);
  Config start = moe_run("moe_from_checkpoint", 1);
  start.enable_checkpointing = false;
  start.load_parameters_path = checkpoint;
  const double loss = train(start).steps.at(0).loss;
  for (const char* arch : {"deepseek", "mixtral"}) {
    SCOPED_TRACE(arch);
    const std::string dir =
        write_hf(std::string("moe_") + arch, std::string("--arch ") + arch, checkpoint);
    EXPECT_EQ(loaded(dir, base.model), ours);
    start.run_name = std::string("moe_from_") + arch;
    start.load_parameters_path = dir;
    EXPECT_EQ(train(start).steps.at(0).loss, loss);
    const ModelConfig m = model_from_hf_config(dir);
    EXPECT_EQ(m.num_experts, 4);
    EXPECT_EQ(m.num_experts_per_tok, 2);
    EXPECT_EQ(m.expert_mlp_dim(), base.model.mlp_dim);
    EXPECT_TRUE(m.norm_topk_prob);
  }
  std::ifstream index(kRoot / "hf/moe_mixtral/model.safetensors", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(index)), {});
  EXPECT_TRUE(contains(bytes, "model.layers.1.block_sparse_moe.experts.3.w2.weight"));
  EXPECT_FALSE(contains(bytes, "mlp.experts"));
}

// What does not match is named with the key to set; what carousel does not implement of an MoE
// architecture is named as such.
TEST(HfImport, MixtureOfExpertsMismatchesAndArchitecturesAreNamed) {
  const Config base = moe_run("moe_errors", 1);
  train(base);
  const std::string checkpoint = (fs::path(base.run_directory()) / "checkpoints/1").string();
  const auto error = [&](const std::string& name, const std::string& args,
                         const ModelConfig& model) {
    return load_error(write_hf(name, args, checkpoint), model);
  };
  std::string msg = error("moe_8", "--arch deepseek --set n_routed_experts=8", base.model);
  EXPECT_TRUE(contains(msg, "n_routed_experts=8 but num_experts=4: set num_experts=8")) << msg;
  ModelConfig no_renorm = base.model;
  no_renorm.norm_topk_prob = false;
  msg = error("moe_mixtral", "--arch mixtral", no_renorm);
  EXPECT_TRUE(contains(msg, "model_type=mixtral has norm_topk_prob=true but norm_topk_prob=false"))
      << msg;
  msg = error("moe_window", "--arch mixtral --set sliding_window=4096", base.model);
  EXPECT_TRUE(contains(msg, "not supported: sliding_window=4096")) << msg;
  msg = error("moe_qwen3", "--arch deepseek --set model_type='\"qwen3_moe\"'", base.model);
  EXPECT_TRUE(contains(msg, "does not implement RMSNorm of queries and keys")) << msg;
  msg = error("moe_v3", "--arch deepseek --set model_type='\"deepseek_v3\"'", base.model);
  EXPECT_TRUE(contains(msg, "multi-head latent attention")) << msg;
  ModelConfig top1 = base.model;
  top1.num_experts_per_tok = 1;
  msg = error("moe_top1", "--arch deepseek --set num_experts_per_tok=1", top1);
  EXPECT_TRUE(contains(msg, "not supported: norm_topk_prob=true with num_experts_per_tok=1"))
      << msg;
  msg = load_error(
      write_hf("moe_as_llama", "--arch deepseek --set model_type='\"llama\"'", checkpoint),
      base.model);
  EXPECT_TRUE(contains(msg, "model_type=llama has num_experts=1 but num_experts=4")) << msg;
}

// What a DeepSeekMoE config.json cannot tell other tools is said when checkpoints will be written.
TEST(HfImport, ExportCaveatsNameWhatOtherToolsWouldRouteOtherwise) {
  ModelConfig m = moe_run("caveats", 1).model;
  EXPECT_EQ(hf_export_caveats(m), "");  // softmax, unscaled, top-2: DeepSeekMoE's routing
  m.routed_score_func = "sigmoid";
  m.routed_scaling_factor = 2.5;
  m.routed_bias = true;
  const std::string msg = hf_export_caveats(m);
  for (const char* what : {"sigmoid scores", "routed_scaling_factor != 1", "the loss-free bias"})
    EXPECT_TRUE(contains(msg, what)) << msg;
  EXPECT_EQ(hf_export_caveats(small_run("dense", 1).model), "");
}

}  // namespace
}  // namespace carousel
