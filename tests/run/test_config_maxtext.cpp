// test_config_maxtext.cpp — MaxText compatibility of the config: the warmup-stable-decay schedule
// against hand-computed values, the renamed learning_rate_final_fraction (old name as an alias),
// head_dim, MaxText keys carousel does not implement, and "did you mean" only for near misses.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numbers>

#include "compute/error.h"
#include "host/config/config.h"
#include "host/runtime/optimizer.h"
#include "tests/support/test_util.h"

namespace carousel {
namespace {

// lr 1, 100 steps, W = 10 warmup steps, final = 0.1; wsd decays over the last D = 20 steps.
Config wsd_config(const std::string& style) {
  Config c;
  c.learning_rate = 1.0;
  c.steps = 100;
  c.warmup_steps_fraction = 0.1;
  c.learning_rate_final_fraction = 0.1;
  c.lr_schedule_type = "wsd";
  c.wsd_decay_steps_fraction = 0.2;
  c.wsd_decay_style = style;
  c.validate();
  return c;
}

TEST(LearningRate, WsdLinearWarmupStableDecayThenZero) {
  const Config c = wsd_config("linear");
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 0), 0.0);
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 5), 0.5);       // warmup, as for cosine
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 10), 1.0);      // stable from the end of warmup
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 50), 1.0);      // still stable
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 79), 1.0);      // last stable step
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 80), 1.0);      // decay step 0 of 20: the peak
  EXPECT_NEAR(learning_rate_at(c, 90), 0.55, 1e-12);   // 0.1 + 0.9 * (1 - 10/20)
  EXPECT_NEAR(learning_rate_at(c, 95), 0.325, 1e-12);  // 0.1 + 0.9 * (1 - 15/20)
  EXPECT_NEAR(learning_rate_at(c, 99), 0.145, 1e-12);  // 0.1 + 0.9 * (1 - 19/20)
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 100), 0.0);     // past the schedule
}

TEST(LearningRate, WsdCosineDecayIsAHalfCosine) {
  const Config c = wsd_config("cosine");
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 79), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 80), 1.0);
  // progress 1/4: 0.1 + 0.9 * (1 + cos(pi/4)) / 2 = 0.868198..., linear would be 0.775.
  EXPECT_NEAR(learning_rate_at(c, 85), 0.1 + 0.45 * (1 + std::sqrt(0.5)), 1e-12);
  EXPECT_NEAR(learning_rate_at(c, 85), 0.8681980515339464, 1e-12);
  EXPECT_NEAR(learning_rate_at(c, 90), 0.55, 1e-12);  // midpoint, as linear
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 100), 0.0);
}

TEST(LearningRate, WsdDecayStepsAreTruncatedAsInMaxText) {
  Config c = wsd_config("linear");
  c.steps = 99;                 // D = int(0.2 * 99) = int(19.8) = 19, decay from step 80
  c.warmup_steps_fraction = 0;  // no warmup: the peak from step 0
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 0), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 79), 1.0);
  EXPECT_NEAR(learning_rate_at(c, 81), 0.1 + 0.9 * (1 - 1.0 / 19), 1e-12);
  c.wsd_decay_steps_fraction = 0;  // no decay: the peak up to the end
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 98), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 99), 0.0);
}

TEST(LearningRate, WsdFollowsLearningRateScheduleSteps) {
  Config c = wsd_config("linear");
  c.learning_rate_schedule_steps = 50;  // W = 5, D = 10: decay over steps 40..49
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 39), 1.0);
  EXPECT_NEAR(learning_rate_at(c, 45), 0.55, 1e-12);
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 50), 0.0);
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 70), 0.0);
}

TEST(LearningRate, WsdRefusesWarmupAndDecayLongerThanTheSchedule) {
  const std::string msg = testing::error_of([] {
    load_config("", {"lr_schedule_type=wsd", "warmup_steps_fraction=0.5",
                     "wsd_decay_steps_fraction=0.6", "steps=100"});
  });
  EXPECT_NE(msg.find("wsd_decay_steps_fraction=0.6"), std::string::npos) << msg;
  EXPECT_NE(msg.find("50 warmup + 60 decay steps exceed the schedule's 100 steps"),
            std::string::npos)
      << msg;
  // Cosine has no decay phase of its own: the wsd keys are refused as keys without effect.
  EXPECT_NE(testing::error_of([] {
              load_config("", {"warmup_steps_fraction=0.5", "wsd_decay_steps_fraction=0.6"});
            }).find("wsd_decay_steps_fraction=0.6 has no effect with lr_schedule_type=cosine"),
            std::string::npos);
}

TEST(Config, OldFinalFractionNameIsAnAliasOfTheNewOne) {
  const LoadedConfig c = load_config("", {"cosine_learning_rate_final_fraction=0.25"});
  EXPECT_DOUBLE_EQ(c.config.learning_rate_final_fraction, 0.25);
  for (const auto& row : c.table) {
    if (row.key == "learning_rate_final_fraction") {
      EXPECT_EQ(row.source, "command line");
    }
  }
  const std::string both = testing::error_of([] {
    load_config("",
                {"cosine_learning_rate_final_fraction=0.2", "learning_rate_final_fraction=0.3"});
  });
  EXPECT_NE(both.find("MaxText's old name of 'learning_rate_final_fraction'"), std::string::npos)
      << both;
  // A file may use the old name and the command line override it with the new one.
  const auto path = std::filesystem::temp_directory_path() / "carousel_alias.yml";
  std::ofstream(path) << "cosine_learning_rate_final_fraction: 0.2\n";
  const LoadedConfig d = load_config(path.string(), {"learning_rate_final_fraction=0.3"});
  EXPECT_DOUBLE_EQ(d.config.learning_rate_final_fraction, 0.3);
}

TEST(Config, HeadDimMustBeTheDerivedOne) {
  EXPECT_EQ(load_config("", {"model_name=llama2-7b", "head_dim=128"}).config.model.head_dim(), 128);
  EXPECT_EQ(load_config("", {"head_dim=16"}).config.head_dim, 16);  // tiny: 64 / 4
  const std::string msg = testing::error_of([] { load_config("", {"head_dim=64"}); });
  EXPECT_NE(msg.find("head_dim=64 is not valid"), std::string::npos) << msg;
  EXPECT_NE(msg.find("base_emb_dim / base_num_query_heads = 64 / 4 = 16"), std::string::npos)
      << msg;
}

// A MaxText key with a carousel counterpart is refused naming the counterpart (issue 40: porting
// a MaxText config was an edit-and-rerun loop without them).
TEST(Config, MaxTextKeysWithACounterpartNameIt) {
  const std::pair<const char*, const char*> cases[] = {
      {"gradient_accumulation_steps=4", "carousel's equivalent: num_pipeline_microbatches"},
      {"profiler=xplane", "carousel's equivalent: profiler_steps=N"},
      {"hardware=gpu", "hardware=gpu is device=cuda"},
      {"ici_sequence_parallelism=2", "carousel's equivalent: ici_context_parallelism"},
      {"mlp_activations=silu", "carousel's llama MLP is SwiGLU"},
  };
  for (const auto& [setting, words] : cases) {
    const std::string msg = testing::error_of([&] { load_config("", {setting}); });
    EXPECT_NE(msg.find(words), std::string::npos) << msg;
    EXPECT_NE(msg.find("is not a carousel key (command line)"), std::string::npos) << msg;
  }
  // Every counterpart named is a MaxText key carousel refuses (not one it reads).
  for (const char* key : {"gradient_accumulation_steps", "profiler", "hardware",
                          "ici_sequence_parallelism", "dcn_sequence_parallelism",
                          "eval_per_device_batch_size", "add_eos", "mlp_activations"}) {
    EXPECT_TRUE(is_unsupported_maxtext_key(key)) << key;
    EXPECT_FALSE(maxtext_equivalent(key).empty()) << key;
  }
}

TEST(Config, MaxTextKeysCarouselLacksAreNamedAsSuch) {
  for (const char* key : {"attention", "quantize_kvcache", "scan_layers", "dcn_expert_parallelism",
                          "tokenizer_type", "eval_dataset_name"}) {
    const std::string msg = testing::error_of([&] { load_config("", {std::string(key) + "=1"}); });
    EXPECT_NE(msg.find(fmt::format("MaxText key '{}' is not supported by carousel", key)),
              std::string::npos)
        << msg;
    EXPECT_EQ(msg.find("did you mean"), std::string::npos) << msg;
  }
  // Mesh axes carousel implements are keys, not matched by the pattern.
  EXPECT_FALSE(is_unsupported_maxtext_key("ici_fsdp_parallelism"));
  EXPECT_FALSE(is_unsupported_maxtext_key("ici_pipeline_parallelism"));
  EXPECT_FALSE(is_unsupported_maxtext_key("ici_tensor_parallelism"));
  EXPECT_FALSE(is_unsupported_maxtext_key("ici_context_parallelism"));
  EXPECT_FALSE(is_unsupported_maxtext_key("ici_expert_parallelism"));
  EXPECT_TRUE(is_unsupported_maxtext_key("ici_autoregressive_parallelism"));
  EXPECT_FALSE(is_unsupported_maxtext_key("dcn_data_parallelism"));
  // No key carousel has is on the list of those it lacks.
  for (const ConfigKey& key : config_keys())
    EXPECT_FALSE(is_unsupported_maxtext_key(key.name)) << key.name;
}

// MaxText's dcn_* factors multiply the ici_* ones (an axis is ici x dcn); carousel folds them
// where its rank order keeps each node's ranks consecutive, and names the axes that may take one
// otherwise.
TEST(Config, DcnFactorsMultiplyTheirAxisWhereNodesStayContiguous) {
  const Config c = load_config("", {"dcn_data_parallelism=2", "dcn_pipeline_parallelism=2",
                                    "ici_fsdp_parallelism=2", "dcn_fsdp_parallelism=3",
                                    "ici_tensor_parallelism=2", "num_pipeline_microbatches=2",
                                    "per_device_batch_size=1"})
                       .config;
  EXPECT_EQ(c.ici_data_parallelism, 2);
  EXPECT_EQ(c.ici_pipeline_parallelism, 2);
  EXPECT_EQ(c.ici_fsdp_parallelism, 6);  // 2 within a node x 3 across
  EXPECT_EQ(c.ici_tensor_parallelism, 2);
  EXPECT_EQ(c.dcn_data_parallelism, 1);  // folded: a saved config reloads to the same mesh
  EXPECT_EQ(c.num_devices(), 48);
  const LoadedConfig loaded = load_config("", {"dcn_data_parallelism=4"});
  bool named = false;
  for (const auto& row : loaded.table) {
    if (row.key == "ici_data_parallelism") named = row.source == "1 x dcn_data_parallelism=4";
  }
  EXPECT_TRUE(named) << "the config table says where ici_data_parallelism=4 came from";
  std::string msg = testing::error_of([] {
    load_config("", {"ici_data_parallelism=2", "dcn_fsdp_parallelism=2"});
  });
  EXPECT_NE(msg.find("dcn_fsdp_parallelism=2 with ici_data_parallelism > 1"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("valid: dcn_* on data only"), std::string::npos) << msg;
  msg = testing::error_of([] {
    load_config("", {"ici_fsdp_parallelism=2", "dcn_context_parallelism=2"});
  });
  EXPECT_NE(msg.find("valid: dcn_* on data, pipeline, fsdp only"), std::string::npos) << msg;
  // Expert ranks sit inside the data axis: no other axis may cross nodes around them.
  msg = testing::error_of([] {
    load_config("", {"num_experts=4", "ici_expert_parallelism=2", "dcn_pipeline_parallelism=2",
                     "num_pipeline_microbatches=2"});
  });
  EXPECT_NE(msg.find("dcn_pipeline_parallelism=2 with ici_expert_parallelism > 1"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("valid: dcn_* on data only"), std::string::npos) << msg;
  msg = testing::error_of([] { load_config("", {"dcn_tensor_parallelism=2"}); });
  EXPECT_NE(msg.find("carousel keeps a tensor group within a node"), std::string::npos) << msg;
  msg = testing::error_of([] { load_config("", {"dcn_context_parallelism=0"}); });
  EXPECT_NE(msg.find("dcn_context_parallelism=0 is not valid; it must be in [1, 4096]"),
            std::string::npos)
      << msg;
}

TEST(Config, DidYouMeanOnlyForNearMisses) {
  EXPECT_EQ(closest_key("stepz"), "steps");                  // 1 edit in 5 characters
  EXPECT_EQ(closest_key("leraning_rate"), "learning_rate");  // 2 in 13
  EXPECT_EQ(closest_key("completely_unrelated"), "");
  EXPECT_EQ(closest_key("lr"), "");  // 2 characters: only an exact (case) match would do
  const std::string msg = testing::error_of([] { load_config("", {"banana=1"}); });
  EXPECT_NE(msg.find("unknown config key 'banana'"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("did you mean"), std::string::npos) << msg;
}

TEST(Config, EvalKeysAreValidated) {
  const Config c = load_config("", {"eval_interval=10", "eval_steps=4", "dataset_type=tokens",
                                    "dataset_path=train_*.bin", "eval_dataset_path=val_*.bin",
                                    "tokenizer_path=out/data/tokenizer.json"})
                       .config;
  EXPECT_EQ(c.eval_interval, 10);
  EXPECT_EQ(c.eval_steps, 4);
  EXPECT_EQ(c.eval_dataset_path, "val_*.bin");
  EXPECT_EQ(c.tokenizer_path, "out/data/tokenizer.json");
  EXPECT_EQ(load_config("", {}).config.eval_interval, 0);  // off by default
  EXPECT_EQ(load_config("", {}).config.eval_steps, -1);    // one pass
  // Synthetic data evaluates on held-out synthetic sequences: no path needed.
  EXPECT_NO_THROW(load_config("", {"eval_interval=5"}));
  std::string msg = testing::error_of([] {
    load_config("", {"eval_interval=10", "dataset_type=tokens", "dataset_path=train_*.bin"});
  });
  EXPECT_NE(msg.find("eval_interval=10 needs eval_dataset_path="), std::string::npos) << msg;
  msg = testing::error_of([] { load_config("", {"eval_steps=0"}); });
  EXPECT_NE(msg.find("eval_steps=0 is not valid"), std::string::npos) << msg;
  msg = testing::error_of([] { load_config("", {"eval_interval=-1"}); });
  EXPECT_NE(msg.find("eval_interval=-1 must be >= 0"), std::string::npos) << msg;
  msg = testing::error_of([] { load_config("", {"eval_dataset_path=gs://bucket/val"}); });
  EXPECT_NE(msg.find("eval_dataset_path"), std::string::npos) << msg;
}

}  // namespace
}  // namespace carousel
