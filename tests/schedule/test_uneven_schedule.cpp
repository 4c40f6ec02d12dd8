// test_uneven_schedule.cpp — uneven pipeline stages before any math runs: the layer <-> stage
// map, the config keys that give it (pipeline_stage_layers, Megatron's first/last sugar, YAML
// lists), and the cost model following each stage's layer count. Expected values are worked out
// by hand in the comments (and in docs/schedules.md "Uneven stages"), not taken from the code.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "compute/error.h"
#include "host/config/config.h"
#include "host/config/schedule_config.h"
#include "host/schedule/maxtext.h"
#include "host/schedule/passes.h"
#include "host/schedule/registry.h"
#include "host/schedule/simulate.h"
#include "host/schedule/stage_layers.h"
#include "tests/support/schedule_timeline.h"

namespace carousel::schedule {
namespace {

Config config_of(std::vector<std::string> overrides) {
  return load_config("", std::move(overrides)).config;
}

// ---- the map ---------------------------------------------------------------------------------

TEST(StageLayers, MapsLayersToStagesByTheCounts) {
  const StageLayers m({1, 3, 3, 1});  // 8 layers: {0} {1,2,3} {4,5,6} {7}
  EXPECT_EQ(m.stages(), 4);
  EXPECT_EQ(m.layers(), 8);
  EXPECT_EQ(m.max_count(), 3);
  EXPECT_FALSE(m.is_even());
  const std::vector<int> first = {0, 1, 4, 7}, stage_of = {0, 1, 1, 1, 2, 2, 2, 3};
  for (int v = 0; v < 4; ++v) EXPECT_EQ(m.first(v), first[v]) << v;
  for (int i = 0; i < 8; ++i) EXPECT_EQ(m.stage_of(i), stage_of[i]) << i;
  EXPECT_EQ(m.to_string(), "[1, 3, 3, 1]");
  // The even split is today's rule: stage v = layers [v L, (v + 1) L).
  const StageLayers even = StageLayers::even(4, 2);
  EXPECT_TRUE(even.is_even());
  for (int i = 0; i < 8; ++i) EXPECT_EQ(even.stage_of(i), i / 2) << i;
}

// ---- config ----------------------------------------------------------------------------------

TEST(UnevenConfig, ListFormsAndRepeatsFromTheLength) {
  for (const char* text : {"pipeline_stage_layers=[1,3,3,1]", "pipeline_stage_layers=1,3,3,1",
                           "pipeline_stage_layers=[1, 3, 3, 1]"}) {
    const Config c = config_of({"ici_pipeline_parallelism=2", "pipeline_schedule=circular",
                                "num_pipeline_microbatches=4", text});
    EXPECT_EQ(c.repeats(), 2) << text;  // 4 entries over S = 2 ranks
    EXPECT_EQ(c.stage_layer_counts(), (std::vector<int>{1, 3, 3, 1})) << text;
    EXPECT_EQ(stage_layers(c).counts(), (std::vector<int>{1, 3, 3, 1})) << text;
  }
  // Empty = even: L per stage, as before.
  const Config even = config_of({"ici_pipeline_parallelism=2", "pipeline_stage_layers=[]"});
  EXPECT_FALSE(even.uneven_stages());
  EXPECT_EQ(even.stage_layer_counts(), (std::vector<int>{1, 1, 1, 1, 1, 1, 1, 1}));
  // One device runs the whole model as one stage, whatever the layout says (a layout given
  // for one device is refused as a key without effect; a config built in code may carry one).
  Config one_device = config_of({});
  one_device.pipeline_stage_layers = {3, 5};
  EXPECT_EQ(stage_layers(one_device).counts(), (std::vector<int>{8}));
  EXPECT_THROW(config_of({"pipeline_stage_layers=[3,5]"}), Error);
}

TEST(UnevenConfig, MegatronFirstAndLastSplitTheRestEvenly) {
  // S = 4, R = 1: first 1, last 1, the 6 others over 2 middle stages = 3 each.
  EXPECT_EQ(config_of({"ici_pipeline_parallelism=4", "decoder_first_pipeline_num_layers=1",
                       "decoder_last_pipeline_num_layers=1", "pipeline_schedule=1f1b"})
                .stage_layer_counts(),
            (std::vector<int>{1, 3, 3, 1}));
  // Only the first given: 8 - 2 = 6 over the 3 others.
  EXPECT_EQ(config_of({"ici_pipeline_parallelism=4", "decoder_first_pipeline_num_layers=2",
                       "pipeline_schedule=1f1b"})
                .stage_layer_counts(),
            (std::vector<int>{2, 2, 2, 2}));
  // With repeats: S = 2, R = 2 gives 4 virtual stages, first and last are stages 0 and 3.
  EXPECT_EQ(config_of({"ici_pipeline_parallelism=2", "num_pipeline_repeats=2",
                       "num_pipeline_microbatches=4", "decoder_last_pipeline_num_layers=2"})
                .stage_layer_counts(),
            (std::vector<int>{2, 2, 2, 2}));
}

TEST(UnevenConfig, YamlFlowAndBlockListsAreRead) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "carousel_uneven_yaml";
  fs::create_directories(dir);
  const std::pair<const char*, const char*> files[] = {
      {"flow.yml",
       "ici_pipeline_parallelism: 2\npipeline_stage_layers: [3, 5]\n"
       "pipeline_schedule: 1f1b\n"},
      {"block.yml",
       "ici_pipeline_parallelism: 2\npipeline_stage_layers:\n  - 3\n  - 5\n"
       "pipeline_schedule: 1f1b\n"}};
  for (const auto& [name, text] : files) {
    std::ofstream(dir / name) << text;
    const Config c = load_config((dir / name).string(), {}).config;
    EXPECT_EQ(c.stage_layer_counts(), (std::vector<int>{3, 5})) << name;
  }
}

// ---- cost model ------------------------------------------------------------------------------

// 1f1b, S = 2, M = 2, layers [1, 3], f = 1, b = 2 per layer: stage 0 costs f = 1, b = 2 and
// stage 1 f = 3, b = 6. Worked by hand:
//   rank 0: 0F0 [0,1) 0F1 [1,2); 0B0 waits for 1B0 (ends 10): [10,12); 0B1 waits for 1B1: [19,21)
//   rank 1: 1F0 [1,4) 1B0 [4,10) 1F1 [10,13) 1B1 [13,19)
// step 21; busy 6 + 18 = 24 of 2 x 21, bubble 18/42 = 3/7. (Even [2, 2] would take 18: the
// heavier stage sets the pace.)
TEST(UnevenCosts, HandWorkedTimeline1f1bLayers1And3) {
  Config cfg = config_of({"ici_pipeline_parallelism=2", "pipeline_schedule=1f1b",
                          "num_pipeline_microbatches=2", "base_num_decoder_layers=4",
                          "pipeline_stage_layers=[1,3]"});
  const Costs costs = schedule_costs(cfg);
  EXPECT_EQ(costs.stage_scale, (std::vector<double>{1, 3}));
  const Program p = lower(generate(schedule_spec(cfg)), {0, 0, false});
  const SimResult sim = simulate(p, costs);
  EXPECT_EQ(timeline_text(sim, 2),
            (std::vector<std::string>{"0F0@0 0F1@1 0B0@10 0B1@19", "1F0@1 1B0@4 1F1@10 1B1@13"}));
  EXPECT_DOUBLE_EQ(sim.step_time, 21);
  EXPECT_EQ(sim.busy, (std::vector<double>{6, 18}));
  EXPECT_NEAR(sim.bubble_fraction, 3.0 / 7, 1e-12);
}

// Why uneven stages pay: the last stage also runs the head. 6 layers, a head of 2 layers
// (schedule_cost_head=2), 1f1b S = 2, M = 2, f = 1, b = 2 per layer. Worked by hand:
//   even [3, 3] -> scales [3, 5]: rank 0 0F0 [0,3) 0F1 [3,6); rank 1 1F0 [3,8) 1B0 [8,18)
//     1F1 [18,23) 1B1 [23,33); rank 0 0B0 [18,24) 0B1 [33,39): step 39
//   uneven [4, 2] -> scales [4, 4]: rank 0 0F0 [0,4) 0F1 [4,8); rank 1 1F0 [4,8) 1B0 [8,16)
//     1F1 [16,20) 1B1 [20,28); rank 0 0B0 [16,24) 0B1 [28,36): step 36
TEST(UnevenCosts, AHeavyHeadMakesTheLighterLastStageFaster) {
  auto simulated = [](std::vector<std::string> layout) {
    layout.insert(layout.end(), {"ici_pipeline_parallelism=2", "pipeline_schedule=1f1b",
                                 "num_pipeline_microbatches=2", "base_num_decoder_layers=6",
                                 "schedule_cost_head=2"});
    const Config cfg = config_of(layout);
    const Costs costs = schedule_costs(cfg);
    return std::pair{costs.stage_scale,
                     simulate(lower(generate(schedule_spec(cfg)), {0, 0, false}), costs)};
  };
  const auto [even_scale, even] = simulated({"num_layers_per_pipeline_stage=3"});
  EXPECT_EQ(even_scale, (std::vector<double>{3, 5}));
  EXPECT_EQ(timeline_text(even, 2),
            (std::vector<std::string>{"0F0@0 0F1@3 0B0@18 0B1@33", "1F0@3 1B0@8 1F1@18 1B1@23"}));
  EXPECT_DOUBLE_EQ(even.step_time, 39);
  const auto [uneven_scale, uneven] = simulated({"pipeline_stage_layers=[4,2]"});
  EXPECT_EQ(uneven_scale, (std::vector<double>{4, 4}));
  EXPECT_EQ(timeline_text(uneven, 2),
            (std::vector<std::string>{"0F0@0 0F1@4 0B0@16 0B1@28", "1F0@4 1B0@8 1F1@16 1B1@20"}));
  EXPECT_DOUBLE_EQ(uneven.step_time, 36);
}

// The costs follow the stages they are given, not the config's keys: one device's single
// stage of all 8 layers costs 8 layers (the config says L = 1 per pipeline stage), and an
// uneven layout whose counts are all equal needs no scale.
TEST(UnevenCosts, ScaleFollowsTheStagesGiven) {
  const Config cfg = config_of({"schedule_cost_f=2", "schedule_cost_b=3"});
  ASSERT_EQ(cfg.num_layers_per_pipeline_stage, 1);
  const Costs whole = schedule_costs(cfg, StageLayers({8}));
  EXPECT_TRUE(whole.stage_scale.empty());
  EXPECT_EQ(whole.f, 16);
  EXPECT_EQ(whole.b, 24);
  const Config equal =
      config_of({"ici_pipeline_parallelism=2", "pipeline_stage_layers=[4,4]", "schedule_cost_f=2"});
  const Costs costs = schedule_costs(equal);
  EXPECT_TRUE(costs.stage_scale.empty());
  EXPECT_EQ(costs.f, 8);
  const Costs uneven = schedule_costs(equal, StageLayers({3, 5}));
  EXPECT_EQ(uneven.stage_scale, (std::vector<double>{3, 5}));
  EXPECT_EQ(uneven.f, 2);
}

// The same costs with no stage_scale and f, b of one layer reproduce the even run exactly: an
// empty scale is 1 everywhere, and a scale of L equals costs multiplied by L.
TEST(UnevenCosts, EvenScaleEqualsMultipliedCosts) {
  const Program p = lower(generate({.kind = "1f1b", .layout = {2, 1, 4}}), {0, 0, false});
  Costs scaled;
  scaled.stage_scale = {2, 2};
  Costs multiplied;
  multiplied.f = 2;
  multiplied.b = 4;
  EXPECT_DOUBLE_EQ(simulate(p, scaled).step_time, simulate(p, multiplied).step_time);
  EXPECT_DOUBLE_EQ(simulate(p, multiplied).step_time, 2 * simulate(p, Costs{}).step_time);
  Costs wrong;
  wrong.stage_scale = {1, 2, 3};
  EXPECT_THROW(simulate(p, wrong), carousel::Error);
}

// One duration per action, read by the simulator and the stream recording alike: compute and
// the stage's collectives scale with its layers; markers, p2p and the optimizer take no time.
TEST(UnevenCosts, DurationOfEachActionKind) {
  Costs c;
  c.f = 1, c.b = 2, c.i = 1.25, c.w = 0.75, c.all_gather = 0.5, c.reduce_scatter = 0.25;
  c.stage_scale = {1, 3};
  EXPECT_EQ(c.duration({Kind::F, 1, 0}), 3);
  EXPECT_EQ(c.duration({Kind::B, 0, 2}), 2);
  EXPECT_EQ(c.duration({Kind::I, 1, 0}), 3.75);
  EXPECT_EQ(c.duration({Kind::W, 1, 0}), 2.25);
  EXPECT_EQ(c.duration({Kind::AG_ISSUE, 1, 0}), 1.5);
  EXPECT_EQ(c.duration({Kind::REDUCE_SCATTER, 0, -1}), 0.25);
  EXPECT_EQ(c.duration({Kind::AG_WAIT, 1, 0}), 0);
  EXPECT_EQ(c.duration({Kind::SEND_F, 0, 0, 1}), 0);
  EXPECT_EQ(c.duration({Kind::OPTIMIZER, -1, -1}), 0);  // no stage: no scale is read
}

// FSDP gathers and reduce-scatters move a stage's weights: each lasts its per-layer cost times
// the stage's layers (here 0.5 and 0.25 per layer, layers [1, 3, 3, 1] on S = 2, R = 2).
TEST(UnevenCosts, CollectivesScaleWithTheStageTheyMove) {
  Config cfg = config_of({"ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2",
                          "num_pipeline_microbatches=4", "pipeline_stage_layers=[1,3,3,1]",
                          "schedule_cost_all_gather=0.5", "schedule_cost_reduce_scatter=0.25",
                          "pipeline_fsdp_ag_per_repeat=true"});
  const Program p = lower(generate(schedule_spec(cfg)), {cfg.weight_slots(), 0, true});
  const SimResult sim = simulate(p, schedule_costs(cfg));
  const std::vector<int> layers = {1, 3, 3, 1};
  int gathers = 0, scatters = 0;
  for (const auto& iv : sim.timeline) {
    const double span = iv.end - iv.start;
    if (iv.action.kind == Kind::AG_ISSUE) {
      EXPECT_DOUBLE_EQ(span, 0.5 * layers[iv.action.stage]) << to_string(iv.action);
      ++gathers;
    } else if (iv.action.kind == Kind::REDUCE_SCATTER) {
      EXPECT_DOUBLE_EQ(span, 0.25 * layers[iv.action.stage]) << to_string(iv.action);
      ++scatters;
    } else if (iv.action.is_compute()) {
      const double per_layer = iv.action.kind == Kind::F ? 1 : 2;
      EXPECT_DOUBLE_EQ(span, per_layer * layers[iv.action.stage]) << to_string(iv.action);
    }
  }
  EXPECT_EQ(gathers, 4);   // BSW: 2R - 2 = 2 per rank (the turn reuses the slot), 2 ranks
  EXPECT_EQ(scatters, 4);  // one per stage
}

// MaxText's iteration table names each cell's own layers: S = 2, R = 2, M = 2, layers
// [1, 3, 3, 1]: repeat 0 runs stage 0 = L0 and stage 1 = L1-3, repeat 1 stage 2 = L4-6 and
// stage 3 = L7.
TEST(UnevenCosts, CircularTableShowsEachStagesLayers) {
  const auto table = circular_table(2, 2, 2, 1, StageLayers({1, 3, 3, 1}));
  const std::string text = format_circular_table(table, false);
  EXPECT_NE(text.find("m0/r0 (L0) "), std::string::npos) << text;
  EXPECT_NE(text.find("m0/r0 (L1-3)"), std::string::npos) << text;
  EXPECT_NE(text.find("m1/r1 (L4-6)"), std::string::npos) << text;
  EXPECT_NE(text.find("m1/r1 (L7) "), std::string::npos) << text;
}

}  // namespace
}  // namespace carousel::schedule
