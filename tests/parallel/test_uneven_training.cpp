// test_uneven_training.cpp — training with uneven pipeline stages (pipeline_stage_layers,
// Megatron's first/last keys) equals the single-device run of tests/support/sequential_training.h,
// on every schedule family, with FSDP in each weight mode, data parallelism and ZeRO-1; and
// checkpoints move between even and uneven layouts.
//
// Tolerances as in test_pipeline.cpp: step 0's loss bitwise where each microbatch runs the same
// GEMMs in the same order (no FSDP, one replica), 1e-6 with FSDP or D > 1 (split GEMMs and loss
// sums), later steps 1e-4 relative (gradient accumulation order, the per-rank norm sum).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "compute/cpu_backend.h"
#include "host/config/config.h"
#include "host/config/schedule_config.h"
#include "host/mesh/mesh.h"
#include "host/runtime/sharded_params.h"
#include "host/report/logging.h"
#include "host/run/trainer.h"
#include "tests/support/sequential_training.h"

namespace carousel {
namespace {

// Global batch 8 sequences whatever the device count (B = per_device_batch_size x devices).
Config uneven_run_config(std::vector<std::string> overrides) {
  init_logging({.rank = 0, .level = "warn", .file_dir = {}});
  std::vector<std::string> keys = {"max_target_length=16",
                                   "steps=3",
                                   "enable_checkpointing=false",
                                   "learning_rate=0.003",
                                   "dataset_type=text",
                                   "dataset_path=" CAROUSEL_TEST_DATA_DIR "/tiny_corpus.txt",
                                   "base_output_directory=/tmp/carousel_uneven_tests"};
  keys.insert(keys.end(), overrides.begin(), overrides.end());
  Config c = load_config("", keys).config;
  c.per_device_batch_size = 8.0 / double(c.num_devices());
  c.validate();
  return c;
}

// The keys that describe the mesh and the schedule; the single-device reference drops them and
// keeps the model (base_num_decoder_layers), the microbatches and everything else.
bool is_layout_key(const std::string& k) {
  for (const char* prefix :
       {"ici_", "pipeline_schedule", "num_pipeline_repeats", "pipeline_stage_layers",
        "decoder_first_pipeline", "decoder_last_pipeline", "pipeline_fsdp", "shard_optimizer"}) {
    if (k.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

struct UnevenCase {
  std::string name;
  std::vector<std::string> keys;
  double first_rtol = 0;  // 0: step 0's loss bitwise equal
};

void PrintTo(const UnevenCase& c, std::ostream* os) { *os << c.name; }

class UnevenEquivalence : public ::testing::TestWithParam<UnevenCase> {};

TEST_P(UnevenEquivalence, LossesMatchTheSingleDeviceRun) {
  const UnevenCase& c = GetParam();
  std::vector<std::string> reference_keys;
  std::copy_if(c.keys.begin(), c.keys.end(), std::back_inserter(reference_keys),
               [](const std::string& k) { return !is_layout_key(k); });
  const Config pipe_cfg = uneven_run_config(c.keys);
  ASSERT_TRUE(pipe_cfg.uneven_stages()) << "the case must exercise uneven stages";
  const auto pipe = train(pipe_cfg).steps;
  const auto single = train_sequentially(uneven_run_config(reference_keys));
  expect_equal_training(pipe, single, c.first_rtol, /*later_norms=*/true);
}

// Stages of 1 and 3 layers on 4 decoder layers; 1, 3, 3, 1 on 8 (first and last lighter, as
// Megatron's layouts are); FSDP layouts put a 1-layer and a 3-layer stage on the same rank, so
// the weight slots must fit the larger one.
const std::string k13 = "pipeline_stage_layers=[1,3]";
const std::string k1331 = "pipeline_stage_layers=[1,3,3,1]";

INSTANTIATE_TEST_SUITE_P(
    Uneven, UnevenEquivalence,
    ::testing::Values(
        UnevenCase{"1f1b_S2_layers_1_3",
                   {"ici_pipeline_parallelism=2", "base_num_decoder_layers=4", k13,
                    "pipeline_schedule=1f1b", "num_pipeline_microbatches=4"}},
        UnevenCase{"gpipe_S2_layers_3_5",
                   {"ici_pipeline_parallelism=2", "pipeline_stage_layers=[3,5]",
                    "pipeline_schedule=gpipe", "num_pipeline_microbatches=4"}},
        UnevenCase{"circular_S2_R2_1331",
                   {"ici_pipeline_parallelism=2", k1331, "num_pipeline_microbatches=4"}},
        UnevenCase{"interleaved_1f1b_S2_R2_1331",
                   {"ici_pipeline_parallelism=2", k1331, "pipeline_schedule=interleaved_1f1b",
                    "num_pipeline_microbatches=4"}},
        UnevenCase{"zb_h1_S2_layers_3_5",
                   {"ici_pipeline_parallelism=2", "pipeline_stage_layers=[3,5]",
                    "pipeline_schedule=zb_h1", "num_pipeline_microbatches=4"}},
        UnevenCase{"zbv_S2_1331",  // V placement: rank 0 holds stages 0 and 3 (2 layers)
                   {"ici_pipeline_parallelism=2", k1331, "pipeline_schedule=zbv",
                    "num_pipeline_microbatches=4"}},
        UnevenCase{"dualpipev_S2_1331",  // zbv's V with overlapped pairs
                   {"ici_pipeline_parallelism=2", k1331, "pipeline_schedule=dualpipev",
                    "num_pipeline_microbatches=4"}},
        UnevenCase{"megatron_first_last_1f1b_S4",
                   {"ici_pipeline_parallelism=4", "decoder_first_pipeline_num_layers=1",
                    "decoder_last_pipeline_num_layers=1", "pipeline_schedule=1f1b",
                    "num_pipeline_microbatches=4"}},
        UnevenCase{"fsdp_circular_S2_R2_F2_gather_every_use",
                   {"ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2", k1331,
                    "num_pipeline_microbatches=4"},
                   1e-6},
        UnevenCase{"fsdp_circular_S2_R2_F2_bsw",
                   {"ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2", k1331,
                    "num_pipeline_microbatches=4", "pipeline_fsdp_ag_per_repeat=true"},
                   1e-6},
        UnevenCase{"fsdp_circular_S2_R2_F2_ag_once",
                   {"ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2", k1331,
                    "num_pipeline_microbatches=4", "pipeline_fsdp_ag_once=true"},
                   1e-6},
        UnevenCase{"fsdp_zb_h1_S2_F2_bsw_layers_1_3",
                   {"ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2",
                    "base_num_decoder_layers=4", k13, "pipeline_schedule=zb_h1",
                    "num_pipeline_microbatches=4", "pipeline_fsdp_ag_per_repeat=true"},
                   1e-6},
        UnevenCase{
            "data_D2_1f1b_S2_layers_1_3",
            {"ici_data_parallelism=2", "ici_pipeline_parallelism=2", "base_num_decoder_layers=4",
             k13, "pipeline_schedule=1f1b", "num_pipeline_microbatches=2"},
            1e-6},
        UnevenCase{"zero1_D2_S2_F2_interleaved_1331",
                   {"ici_data_parallelism=2", "ici_pipeline_parallelism=2",
                    "ici_fsdp_parallelism=2", k1331, "pipeline_schedule=interleaved_1f1b",
                    "num_pipeline_microbatches=2", "shard_optimizer_over_data=true"},
                   1e-6},
        UnevenCase{"tied_1f1b_S2_layers_1_3",
                   {"ici_pipeline_parallelism=2", "base_num_decoder_layers=4", k13,
                    "pipeline_schedule=1f1b", "num_pipeline_microbatches=4",
                    "logits_via_embedding=true"}}),
    [](const auto& info) { return info.param.name; });

// The executor follows the map: each rank's parameter layout holds, per local stage, exactly
// the layers the layout string gives that stage (worked out by hand: [1, 3, 3, 1] is stages
// {0} {1,2,3} {4,5,6} {7}; loop placement puts stages 0, 2 on rank 0 and 1, 3 on rank 1; zbv's V
// puts 0, 3 on rank 0 and 1, 2 on rank 1). Equal losses alone would not show it: an even split
// trains the same model.
TEST(UnevenLayout, EachRankHoldsTheLayersOfItsStages) {
  using Held = std::map<int, std::vector<int>>;  // stage -> its layers on this rank
  const std::vector<std::pair<std::string, std::vector<Held>>> cases = {
      {"circular", {Held{{0, {0}}, {2, {4, 5, 6}}}, Held{{1, {1, 2, 3}}, {3, {7}}}}},
      {"zbv", {Held{{0, {0}}, {3, {7}}}, Held{{1, {1, 2, 3}}, {2, {4, 5, 6}}}}}};
  for (const auto& [schedule, expected] : cases) {
    const Config cfg =
        uneven_run_config({"ici_pipeline_parallelism=2", k1331, "pipeline_schedule=" + schedule,
                           "num_pipeline_microbatches=4"});
    const schedule::Layout layout = lowered_program(cfg).layout;
    for (int rank = 0; rank < 2; ++rank) {
      CpuBackend be;
      RankCommunicators comms{};  // F = D = 1: the layout needs no communication
      const ShardedParams params(cfg, layout, RankPlace::of(rank, MeshShape::of(cfg)), be, comms);
      Held held;
      for (const auto& [stage, layers] : expected[rank]) {
        std::set<int> seen;
        for (const auto& spec : params.weights(stage).specs) seen.insert(spec.layer);
        held[stage] = {seen.begin(), seen.end()};
      }
      EXPECT_EQ(held, expected[rank]) << schedule << " rank " << rank;
    }
  }
}

// Starts `to` from `from`'s checkpoint of `step` (copied into `to`'s run directory) and trains
// to to.steps.
TrainResult resume_from(const Config& from, const Config& to, int step) {
  namespace fs = std::filesystem;
  fs::remove_all(to.run_directory());
  fs::create_directories(fs::path(to.run_directory()) / "checkpoints");
  const std::string dir = "checkpoints/" + std::to_string(step);
  fs::copy(fs::path(from.run_directory()) / dir, fs::path(to.run_directory()) / dir,
           fs::copy_options::recursive);
  return train(to);
}

Config checkpointed(std::vector<std::string> layout, const std::string& run_name) {
  layout.insert(layout.end(), {"base_num_decoder_layers=4", "pipeline_schedule=1f1b",
                               "num_pipeline_microbatches=2", "enable_checkpointing=true",
                               "learning_rate_schedule_steps=4", "steps=4", "checkpoint_period=2",
                               "run_name=" + run_name});
  Config c = uneven_run_config(layout);
  std::filesystem::remove_all(c.run_directory());
  return c;
}

// Checkpoints hold the whole model under global names, so the stage layout may change on
// resume: an uneven run (FSDP, layers [1, 3]) continues an even run's step-2 checkpoint (L = 2)
// like the even run did, and the even layout continues the uneven run's checkpoint (written by
// gathering the uneven shards) like the uneven run did. 1e-5: the two layouts sum the gradient
// norm in other orders, which moves the clipping scale in its last bits.
TEST(UnevenCheckpoint, ResumesAcrossEvenAndUnevenLayouts) {
  const std::vector<std::string> even = {"ici_pipeline_parallelism=2",
                                         "num_layers_per_pipeline_stage=2"};
  const std::vector<std::string> uneven = {"ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2",
                                           "pipeline_stage_layers=[1,3]"};
  const Config even_run = checkpointed(even, "even_straight");
  const auto even_steps = train(even_run).steps;
  const TrainResult uneven_resumed =
      resume_from(even_run, checkpointed(uneven, "uneven_from_even"), 2);
  EXPECT_EQ(uneven_resumed.start_step, 2);
  ASSERT_EQ(uneven_resumed.steps.size(), 2u);
  for (int s = 0; s < 2; ++s) {
    EXPECT_NEAR(uneven_resumed.steps[s].loss, even_steps[2 + s].loss, 1e-5 * even_steps[2 + s].loss)
        << "step " << 2 + s;
  }

  const Config uneven_run = checkpointed(uneven, "uneven_straight");
  const auto uneven_steps = train(uneven_run).steps;
  const TrainResult even_resumed =
      resume_from(uneven_run, checkpointed(even, "even_from_uneven"), 2);
  EXPECT_EQ(even_resumed.start_step, 2);
  ASSERT_EQ(even_resumed.steps.size(), 2u);
  for (int s = 0; s < 2; ++s) {
    EXPECT_NEAR(even_resumed.steps[s].loss, uneven_steps[2 + s].loss,
                1e-5 * uneven_steps[2 + s].loss)
        << "step " << 2 + s;
  }
}

}  // namespace
}  // namespace carousel
