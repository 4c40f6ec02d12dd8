// test_config.cpp — the config table: presets, precedence, parsing and the errors users see.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "compute/error.h"
#include "host/config/config.h"
#include "host/parallel/optimizer.h"
#include "host/schedule/registry.h"
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
  // One device generates no schedule: only the name and its knobs are checked (R = 8 is fine).
  EXPECT_NO_THROW(load_config("", {"pipeline_schedule=1f1b"}));
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
