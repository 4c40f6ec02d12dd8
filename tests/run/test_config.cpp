// test_config.cpp — the config table: presets, precedence, parsing and the errors users see.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "compute/error.h"
#include "host/config/config.h"
#include "host/io/huggingface/hf_import.h"
#include "host/runtime/optimizer.h"
#include "host/reliability/fault_injection.h"
#include "host/schedule/registry.h"
#include "tests/support/log_capture.h"
#include "tests/support/test_util.h"

namespace carousel {
namespace {

std::string write_yaml(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream(path) << text;
  return path.string();
}

TEST(Config, DefaultsAreValidAndTiny) {
  const LoadedConfig c = load_config("", {});
  EXPECT_EQ(c.config.model.emb_dim, 64);
  EXPECT_EQ(c.config.model.num_layers, 8);
  EXPECT_EQ(c.config.global_batch(), 8);
  EXPECT_EQ(c.table.size(), config_keys().size());
}

TEST(Config, PresetThenFileThenCommandLine) {
  const std::string file =
      write_yaml("carousel_cfg1.yml", "model_name: llama2-7b\nsteps: 50\nlearning_rate: 0.01\n");
  const LoadedConfig c =
      load_config(file, {"learning_rate=0.02", "base_num_decoder_layers=2", "dtype=float32"});
  EXPECT_EQ(c.config.model.emb_dim, 4096);         // from the preset
  EXPECT_EQ(c.config.model.num_layers, 2);         // command line beats the preset
  EXPECT_EQ(c.config.steps, 50);                   // file
  EXPECT_DOUBLE_EQ(c.config.learning_rate, 0.02);  // command line beats the file
  for (const auto& row : c.table) {
    if (row.key == "steps") {
      EXPECT_EQ(row.source, "file " + file);
    } else if (row.key == "learning_rate") {
      EXPECT_EQ(row.source, "command line");
    } else if (row.key == "base_mlp_dim") {
      EXPECT_EQ(row.source, "preset llama2-7b");
    } else if (row.key == "adam_b1") {
      EXPECT_EQ(row.source, "default");
    }
  }
}

// MaxText's base_config: the base (relative to the file naming it) is read first, the file's
// keys override it, bases chain; several files compose left to right, the command line last.
TEST(Config, BaseConfigChainsAndSeveralFilesCompose) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "carousel_cfg_inherit";
  fs::create_directories(dir / "sub");
  std::ofstream(dir / "base.yml") << "steps: 10\nlearning_rate: 0.01\nlog_period: 3\n";
  std::ofstream(dir / "sub" / "mid.yml") << "base_config: ../base.yml\nsteps: 20\n";
  std::ofstream(dir / "run.yml") << "base_config: sub/mid.yml\nlearning_rate: 0.02\n";
  std::ofstream(dir / "late.yml") << "log_period: 7\n";
  const LoadedConfig c =
      load_config(std::vector<std::string>{(dir / "run.yml").string(), (dir / "late.yml").string()},
                  {"steps=30"});
  EXPECT_EQ(c.config.steps, 30);                   // the command line beats every file
  EXPECT_DOUBLE_EQ(c.config.learning_rate, 0.02);  // run.yml beats its base chain
  EXPECT_EQ(c.config.log_period, 7);               // late.yml beats run.yml's base
  EXPECT_EQ(load_config((dir / "run.yml").string(), {}).config.steps, 20);  // mid beats base
  for (const auto& row : c.table) {
    if (row.key == "learning_rate") {
      EXPECT_EQ(row.source, "file " + (dir / "run.yml").string());
    }
  }
  std::ofstream(dir / "loop_a.yml") << "base_config: loop_b.yml\n";
  std::ofstream(dir / "loop_b.yml") << "base_config: loop_a.yml\n";
  EXPECT_NE(testing::error_of([&] { load_config((dir / "loop_a.yml").string(), {}); })
                .find("inherits from itself through base_config"),
            std::string::npos);
  std::ofstream(dir / "orphan.yml") << "base_config: nowhere.yml\n";
  const std::string msg = testing::error_of([&] { load_config((dir / "orphan.yml").string(), {}); });
  EXPECT_NE(msg.find("base_config 'nowhere.yml' does not exist (looked for '" +
                     (dir / "nowhere.yml").string() + "'"),
            std::string::npos)
      << msg;
}

TEST(Config, UnknownKeySuggestsTheClosest) {
  const std::string msg = testing::error_of([] { load_config("", {"leraning_rate=0.1"}); });
  EXPECT_NE(msg.find("unknown config key 'leraning_rate'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean 'learning_rate'"), std::string::npos) << msg;
}

TEST(Config, WrongTypesNameKeyAndValue) {
  EXPECT_NE(testing::error_of([] {
              load_config("", {"steps=ten"});
            }).find("config key 'steps' expects an integer, got 'ten'"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] {
              load_config("", {"learning_rate=fast"});
            }).find("'learning_rate' expects a number, got 'fast'"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] {
              load_config("", {"enable_checkpointing=maybe"});
            }).find("expects true or false, got 'maybe'"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] { load_config("", {"steps"}); }).find("is not key=value"),
            std::string::npos);
}

TEST(Config, InvalidValuesSayWhatIsValid) {
  EXPECT_NE(testing::error_of([] {
              load_config("", {"num_pipeline_microbatches=3"});
            }).find("num_pipeline_microbatches=3 must divide the global batch 8"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] {
              load_config("", {"dtype=float16"});
            }).find("dtype='float16' is not valid; use float32 or bfloat16"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] {
              load_config("", {"weight_dtype=bfloat16"});
            }).find("weight_dtype='bfloat16' is not valid; master weights"),
            std::string::npos);

  EXPECT_NE(testing::error_of([] {
              load_config("", {"model_name=gpt5"});
            }).find("model_name='gpt5' is not a known model"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] {
              load_config("", {"dataset_type=tokens"});
            }).find("needs dataset_path=FILE"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] {
              load_config("", {"device=gpu"});
            }).find("device='gpu' is not valid; use cpu, cuda or auto"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] {
              load_config("", {"per_device_batch_size=2.5"});
            }).find("is not a positive whole number"),
            std::string::npos);
}

// Expert parallelism's keys: each refusal names the keys and what would be valid.
TEST(Config, ExpertParallelismNeedsExpertsItDivides) {
  const auto error = [](std::vector<std::string> keys) {
    return testing::error_of([&] { load_config("", keys); });
  };
  EXPECT_NE(error({"ici_expert_parallelism=2"})
                .find("ici_expert_parallelism=2 splits routed experts, and this model has none "
                      "(num_experts=1)"),
            std::string::npos);
  EXPECT_NE(error({"num_experts=4", "ici_expert_parallelism=3", "per_device_batch_size=1"})
                .find("ici_expert_parallelism=3 does not divide num_experts=4"),
            std::string::npos);
  // ZeRO-1 splits the moments over the replicas of each expert rank (docs/moe.md).
  EXPECT_EQ(error({"num_experts=4", "ici_expert_parallelism=2", "ici_data_parallelism=2",
                   "per_device_batch_size=2", "shard_optimizer_over_data=true"}),
            "<no error>");
  EXPECT_NE(error({"num_experts=4", "ici_expert_parallelism=2", "num_pipeline_microbatches=8",
                   "per_device_batch_size=4"})
                .find("ici_fsdp_parallelism x ici_data_parallelism x ici_expert_parallelism = 1 "
                      "x 1 x 2 ranks cannot split evenly"),
            std::string::npos);
  // E multiplies the devices like the other axes: 2 x 2 devices, a global batch of 8.
  const Config ok = load_config("", {"num_experts=4", "ici_expert_parallelism=2",
                                     "ici_data_parallelism=2", "per_device_batch_size=2"})
                        .config;
  EXPECT_EQ(ok.num_devices(), 4);
  EXPECT_EQ(ok.global_batch(), 8);
}

// The pipeline_schedule key's help (and so docs/config.md) comes from the schedule registry.
TEST(Config, ScheduleKeyHelpListsEveryRegisteredSchedule) {
  for (const auto& k : config_keys()) {
    if (k.name != "pipeline_schedule") continue;
    for (const auto& row : schedule::schedules()) {
      EXPECT_NE(k.help.find(std::string(row.name)), std::string::npos) << row.name;
    }
    return;
  }
  FAIL() << "no pipeline_schedule key";
}

// Config validation runs the registry's checks: `carousel train` and `carousel schedule` reject
// a schedule with the message generate() gives, before any math runs.
TEST(Config, ScheduleErrorsAreTheRegistrysBeforeAnyMath) {
  const std::string unknown =
      testing::error_of([] { load_config("", {"pipeline_schedule=zigzag"}); });
  EXPECT_EQ(unknown, testing::error_of([] { schedule::find_schedule("zigzag"); }));
  for (const auto& row : schedule::schedules()) {
    EXPECT_NE(unknown.find(std::string(row.name)), std::string::npos) << unknown;
  }
  // S = 2, 8 layers, L = 1 given: R = 4 repeats, which 1f1b cannot run. Without L the layout
  // is derived: L = 8 / 2, R = 1, and the table says where L came from.
  const LoadedConfig derived =
      load_config("", {"pipeline_schedule=1f1b", "ici_pipeline_parallelism=2"});
  EXPECT_EQ(derived.config.num_layers_per_pipeline_stage, 4);
  EXPECT_EQ(derived.config.repeats(), 1);
  for (const auto& row : derived.table) {
    if (row.key == "num_layers_per_pipeline_stage") {
      EXPECT_EQ(row.source, "derived: 8 layers / S=2 (pipeline_schedule=1f1b runs one stage per rank)");
    }
  }
  EXPECT_EQ(load_config("", {"ici_pipeline_parallelism=2"}).config.repeats(), 4);  // circular
  const std::string repeats = testing::error_of([] {
    load_config("", {"pipeline_schedule=1f1b", "ici_pipeline_parallelism=2",
                     "num_layers_per_pipeline_stage=1"});
  });
  EXPECT_NE(
      repeats.find("for repeats use circular, interleaved_1f1b, looped_bfs, interleaved_zb, zbv or "
                   "dualpipev"),
      std::string::npos)
      << repeats;
  EXPECT_EQ(repeats, testing::error_of([] {
              schedule::generate({.kind = "1f1b", .layout = {2, 4, 2}});
            }));
  const std::string group = testing::error_of([] {
    load_config("", {"pipeline_schedule=interleaved_1f1b", "ici_pipeline_parallelism=2",
                     "num_pipeline_microbatches=4", "pipeline_microbatch_group_size=3"});
  });
  EXPECT_NE(group.find("S <= g <= M and M % g == 0 (S=2, M=4, g=3)"), std::string::npos) << group;
  EXPECT_NE(testing::error_of([] {
              load_config(
                  "", {"pipeline_schedule=gpipe", "base_num_decoder_layers=2",
                       "ici_pipeline_parallelism=2", "pipeline_delay_activation_forwarding=true"});
            }).find("pipeline_delay_activation_forwarding applies to pipeline_schedule=circular"),
            std::string::npos);
  EXPECT_NO_THROW(load_config("", {"pipeline_schedule=circular", "ici_pipeline_parallelism=2",
                                   "pipeline_delay_activation_forwarding=true"}));
  // One device generates no schedule: only the name and its knobs are checked, and a schedule
  // named for one device is a key without effect (config_effect.h).
  EXPECT_NE(testing::error_of([] { load_config("", {"pipeline_schedule=1f1b"}); })
                .find("pipeline_schedule='1f1b' has no effect on one device"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] {
              load_config("", {"pipeline_schedule=1f1b", "base_num_decoder_layers=2",
                               "pipeline_delay_activation_forwarding=true"});
            }).find("applies to pipeline_schedule=circular, not 1f1b"),
            std::string::npos);
}

TEST(Config, BadYamlFiles) {
  EXPECT_NE(testing::error_of([] { load_config("/nonexistent/c.yml", {}); }).find("does not exist"),
            std::string::npos);
  const std::string nested = write_yaml("carousel_cfg2.yml", "steps:\n  a: 1\n");
  EXPECT_NE(testing::error_of([&] {
              load_config(nested, {});
            }).find("key 'steps' must have a single value"),
            std::string::npos);
  const std::string unknown = write_yaml("carousel_cfg3.yml", "stepz: 3\n");
  EXPECT_NE(testing::error_of([&] { load_config(unknown, {}); }).find("did you mean 'steps'"),
            std::string::npos);
}

TEST(LearningRate, WarmupCosineThenZero) {
  Config c;
  c.learning_rate = 1.0;
  c.steps = 100;
  c.warmup_steps_fraction = 0.1;
  c.learning_rate_final_fraction = 0.1;
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 0), 0.0);
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 5), 0.5);      // halfway through 10 warmup steps
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 10), 1.0);     // peak
  EXPECT_NEAR(learning_rate_at(c, 55), 0.55, 1e-12);  // cosine midpoint: (1 + 0.1) / 2
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 100), 0.0);    // past the schedule
  EXPECT_DOUBLE_EQ(clip_scale(4.0, 1.0), 0.25);
  EXPECT_DOUBLE_EQ(clip_scale(0.5, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(clip_scale(4.0, 0.0), 1.0);  // off
}

// A key set where the config ignores it is an error naming the key, what takes its effect away
// and the key that would give it effect (config_effect.h). Before, each of these loaded and the
// key did nothing: dataset_path trained on synthetic data, top-2 routing of a dense model, ...
TEST(Config, KeysWithoutEffectAreErrorsNamingWhatWouldGiveThemEffect) {
  struct Case {
    std::vector<std::string> keys;
    std::vector<std::string> words;
  };
  const std::string text = "dataset_type=text";
  const Case cases[] = {
      {{"dataset_path=x.bin"},
       {"dataset_path='x.bin' has no effect with dataset_type=synthetic", "dataset_type=tokens"}},
      {{"dataset_path=a/*.bin,0.7;b/*.bin,0.3"}, {"dataset_path='a/*.bin,0.7;b/*.bin,0.3'"}},
      {{"enable_data_shuffling=true"}, {"enable_data_shuffling=true", "dataset_type=synthetic"}},
      {{text, "dataset_path=x.txt", "eval_dataset_path=y.txt"},
       {"eval_dataset_path='y.txt' has no effect with eval_interval=0", "set eval_interval=N"}},
      {{"eval_steps=3"}, {"eval_steps=3", "eval_interval=0"}},
      {{"data_shuffle_seed=7"}, {"data_shuffle_seed=7", "set enable_data_shuffling=true"}},
      {{"eos_id=3"}, {"eos_id=3 has no effect with packing=false", "set packing=true"}},
      {{"enable_checkpointing=false", "tokenizer_path=t.json"},
       {"tokenizer_path='t.json' has no effect", "dataset_type=tokens, packing=true or"}},
      {{"wsd_decay_style=cosine"}, {"wsd_decay_style='cosine'", "set lr_schedule_type=wsd"}},
      {{"skip_first_n_steps_for_profiler=2"}, {"profiler_steps=0", "set profiler_steps=N"}},
      {{"enable_checkpointing=false", "checkpoint_period=5"},
       {"checkpoint_period=5 has no effect with enable_checkpointing=false"}},
      {{"enable_checkpointing=false", "max_num_checkpoints_to_keep=2"},
       {"max_num_checkpoints_to_keep=2", "set enable_checkpointing=true"}},
      {{"replica_check_interval=10"}, {"replica_check_interval=10", "ici_data_parallelism > 1"}},
      {{"shard_optimizer_over_data=true"},
       {"shard_optimizer_over_data=true has no effect with one data replica"}},
      {{"ici_pipeline_parallelism=2", "pipeline_fsdp_ag_once=true"},
       {"pipeline_fsdp_ag_once=true", "ici_fsdp_parallelism=1", "set ici_fsdp_parallelism > 1"}},
      {{"ici_pipeline_parallelism=2", "pipeline_prefetch_lookahead=2"},
       {"pipeline_prefetch_lookahead=2", "set ici_fsdp_parallelism > 1"}},
      {{"cpu_link_gigabytes_per_second=1"},
       {"cpu_link_gigabytes_per_second=1 has no effect on one device"}},
      {{"pipeline_schedule=gpipe"}, {"pipeline_schedule='gpipe' has no effect on one device"}},
      {{"pipeline_parallel_layers=4"}, {"pipeline_parallel_layers=4", "on one device"}},
      {{"schedule_cost_exchange=0.5"}, {"schedule_cost_exchange=0.5", "ici_expert_parallelism"}},
      // Mixture-of-experts knobs: on a dense model, and the bias's rate without the bias.
      {{"num_experts_per_tok=2"},
       {"num_experts_per_tok=2 has no effect on a dense model (num_experts=1",
        "set num_experts > 1"}},
      {{"shared_experts=1"}, {"shared_experts=1", "dense model"}},
      {{"load_balance_loss_weight=0.01"}, {"load_balance_loss_weight=0.01", "dense model"}},
      {{"routed_bias=true"}, {"routed_bias=true", "dense model"}},
      {{"num_experts=4", "routed_bias_update_rate=0.001"},
       {"routed_bias_update_rate=0.001 has no effect with routed_bias=false",
        "set routed_bias=true"}},
      {{"first_num_dense_layers=8", "num_experts=4"},
       {"num_experts=4 has no effect with first_num_dense_layers=8", "below 8"}},
      {{"decoder_block=simple", "rope_max_timescale=500000"},
       {"rope_max_timescale=500000", "decoder_block=simple", "set decoder_block=llama"}},
      {{"gpu_kernels=reference"}, {"gpu_kernels='reference' has no effect with device=cpu"}},
  };
  for (const Case& c : cases) {
    const std::string msg = testing::error_of([&] { load_config("", c.keys); });
    for (const auto& word : c.words) EXPECT_NE(msg.find(word), std::string::npos) << msg;
  }
  // From a file, the message names where the key was set.
  const std::string file = write_yaml("carousel_no_effect.yml", "steps: 3\ndataset_path: x.bin\n");
  EXPECT_NE(testing::error_of([&] { load_config(file, {}); })
                .find("remove dataset_path (from config file '" + file + "' line 2)"),
            std::string::npos);
}

// A key at its default sets nothing, and one a later source disabled (the command line over a
// file) is a warning naming both, so `configs/demo.yml ici_fsdp_parallelism=1` still runs.
TEST(Config, KeysAtTheirDefaultOrDisabledLaterAreNotErrors) {
  EXPECT_EQ(testing::error_of([] {
              load_config("", {"shard_optimizer_over_data=false", "load_balance_loss_weight=0",
                               "replica_check_interval=100", "pipeline_schedule=circular",
                               "num_experts=4", "routed_bias=true", "routed_bias_update_rate=0.001"});
            }),
            "<no error>");
  const std::string file = write_yaml(
      "carousel_fsdp.yml",
      "ici_pipeline_parallelism: 2\nici_fsdp_parallelism: 2\npipeline_fsdp_ag_per_repeat: true\n");
  testing::LogCapture log;
  EXPECT_EQ(testing::error_of([&] { load_config(file, {"ici_fsdp_parallelism=1"}); }), "<no error>");
  const std::string warned = log.text.str();
  EXPECT_NE(warned.find("pipeline_fsdp_ag_per_repeat=true (config file '" + file +
                        "' line 3) has no effect with ici_fsdp_parallelism=1"),
            std::string::npos)
      << warned;
  EXPECT_NE(warned.find("ici_fsdp_parallelism=1 (command line) makes it"), std::string::npos);
  EXPECT_EQ(testing::error_of([] {
              load_config(CAROUSEL_SOURCE_DIR "/configs/demo.yml",
                          {"ici_pipeline_parallelism=1", "ici_fsdp_parallelism=1",
                           "per_device_batch_size=8"});
            }),
            "<no error>");
  // On the command line each argument is a source: a later one turns an earlier one off (a
  // warning), an earlier one makes a later one an error.
  {
    testing::LogCapture later;
    EXPECT_EQ(testing::error_of([] {
                load_config("", {"checkpoint_period=5", "enable_checkpointing=false"});
              }),
              "<no error>");
    EXPECT_NE(later.text.str().find("checkpoint_period=5 (command line) has no effect"),
              std::string::npos);
  }
  // Given in the same source as what disables it: an error.
  EXPECT_NE(testing::error_of([&] { load_config(file, {"pipeline_fsdp_ag_once=false",
                                                       "ici_fsdp_parallelism=1",
                                                       "pipeline_fsdp_ag_per_repeat=true"}); })
                .find("pipeline_fsdp_ag_per_repeat=true has no effect"),
            std::string::npos);
}

// MaxText's base_config names a file a config file extends; on the command line it was an
// "unknown key". Mesh factors across nodes are bounded as the axis they make.
TEST(Config, MisleadingMessagesNameTheRealCause) {
  EXPECT_NE(testing::error_of([] { load_config("", {"base_config=base.yml"}); })
                .find("base_config is read from a config file (the file it extends); on the "
                      "command line give that file itself"),
            std::string::npos);
  const std::string axis = testing::error_of(
      [] { load_config("", {"dcn_data_parallelism=4096", "ici_data_parallelism=4096"}); });
  EXPECT_NE(axis.find("ici_data_parallelism=4096 x dcn_data_parallelism=4096 = 16777216 ranks on "
                      "the data axis; an axis (ici x dcn) has at most 4096 ranks"),
            std::string::npos)
      << axis;
  // An HF config.json with an invalid size is refused as such, not turned into advice to set
  // base_num_decoder_layers=-8.
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "carousel_hf_negative_layers";
  fs::create_directories(dir);
  std::ofstream(dir / "config.json")
      << R"({"model_type": "llama", "vocab_size": 256, "hidden_size": 64, "num_hidden_layers": -8,
             "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 172})";
  const std::string hf = testing::error_of([&] { check_hf_config(dir.string(), ModelConfig{}); });
  EXPECT_NE(hf.find("num_hidden_layers=-8 is not a valid value"), std::string::npos) << hf;
  EXPECT_NE(hf.find("damaged or not a model's config.json"), std::string::npos) << hf;
  EXPECT_EQ(hf.find("set base_num_decoder_layers=-8"), std::string::npos) << hf;
  fs::remove_all(dir);
}

// CAROUSEL_FAULT is read strictly and against the run it is set for: a fault that could never
// fire (a rank the run lacks, a step past its end, a kill where nothing is saved) or a number
// that is not one (rank=1.5 fired at rank 1) is an error, not a test silently run without it.
TEST(Config, InjectedFaultsAreCheckedAgainstTheRun) {
  for (const char* bad : {"nan:rank=1.5,step=1", "stall:rank=1,step=1e30,action=1",
                          "stall:rank=0,step=1,action=1,seconds=nan", "nan:rank=-3,step=1",
                          "nan:rank=1,rank=2,step=1", "stall:step=1,action=2", "kill:step=2"}) {
    EXPECT_THROW(parse_faults(bad), Error) << bad;
  }
  const auto with_fault = [](const char* fault, std::vector<std::string> keys) {
    ::setenv("CAROUSEL_FAULT", fault, 1);
    const std::string msg = testing::error_of([&] { load_config("", keys); });
    ::unsetenv("CAROUSEL_FAULT");
    return msg;
  };
  EXPECT_NE(with_fault("stall:rank=7,step=0,action=1,seconds=1", {"ici_data_parallelism=2"})
                .find("rank=7 does not exist in this run of 2 rank(s) (0 to 1)"),
            std::string::npos);
  EXPECT_NE(with_fault("nan:step=9", {"steps=5"}).find("step=9 is never reached"),
            std::string::npos);
  EXPECT_NE(with_fault("kill:point=begin,step=3", {"steps=6", "checkpoint_period=2"})
                .find("step=3 is no checkpoint of this run"),
            std::string::npos);
  EXPECT_NE(with_fault("slowsave:step=2,seconds=1", {"enable_checkpointing=false"})
                .find("saves no checkpoint"),
            std::string::npos);
  EXPECT_EQ(with_fault("kill:point=begin,step=4", {"steps=6", "checkpoint_period=2"}),
            "<no error>");
  EXPECT_EQ(with_fault("stall:rank=1,step=1,action=3,seconds=4", {"ici_data_parallelism=2"}),
            "<no error>");
}

TEST(Config, DocsListEveryKey) {
  std::ifstream in(CAROUSEL_SOURCE_DIR "/docs/config.md");
  const std::string doc((std::istreambuf_iterator<char>(in)), {});
  ASSERT_FALSE(doc.empty());
  for (const auto& k : config_keys()) {
    EXPECT_NE(doc.find("\n" + k.name + " "), std::string::npos)
        << k.name
        << " is missing from docs/config.md; regenerate it with carousel train --help-keys";
  }
}

}  // namespace
}  // namespace carousel
