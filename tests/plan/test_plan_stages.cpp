// test_plan_stages.cpp — `carousel plan` searches uneven stages: the balanced split of the layers
// (plan_search.h) worked out by hand, and a pipeline whose head is so expensive that moving
// layers off the last stage is the known best, found with its hand-worked step time.
//
// The model is the tiny preset at T = 16 with a 4096-token vocabulary: E 64, N 8, 45312 matmul
// parameters per layer, so a layer's forward is 2 x 45312 + 2 T E = 92672 FLOPs per token and,
// with remat=full, forward + backward 4 forwards; the head is 6 V E = 1 572 864 FLOPs per token,
// h = 1572864 / (4 x 92672) = 4.243 layers on the last stage.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "host/config/config.h"
#include "host/config/schedule_config.h"
#include "host/plan/plan_search.h"
#include "host/schedule/simulate.h"

namespace carousel {
namespace {

TEST(PlanStages, BalancedSplitsWorkedByHand) {
  // No head: as even as possible, the extra layers just before the last stage.
  EXPECT_EQ(plan::balanced_stage_layers(8, 4, 0.0), (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(plan::balanced_stage_layers(8, 3, 0.0), (std::vector<int>{2, 3, 3}));
  EXPECT_EQ(plan::balanced_stage_layers(7, 1, 3.0), (std::vector<int>{7}));
  // A head of 4.24 layers on 8 layers over 2 stages: [4, 4] costs 4 and 8.24, [5, 3] 5 and
  // 7.24, [6, 2] 6 and 6.24, [7, 1] 7 and 5.24; the largest is least at [6, 2].
  EXPECT_EQ(plan::balanced_stage_layers(8, 2, 4.243), (std::vector<int>{6, 2}));
  // llama3-8b's head (1.57 layers), 32 layers over 4 stages: [8, 8, 8, 8] costs at most 9.57;
  // the last stage with 7 leaves 25 for three (8, 8, 9): at most 9; with 6, 26 (8, 9, 9):
  // also 9, and of equal splits the larger last stage is kept.
  EXPECT_EQ(plan::balanced_stage_layers(32, 4, 1.57), (std::vector<int>{8, 8, 9, 7}));
  // llama2-7b's (0.45): the even split is already the best.
  EXPECT_EQ(plan::balanced_stage_layers(32, 4, 0.45), (std::vector<int>{8, 8, 8, 8}));
  // Every stage keeps at least one layer, however heavy the head.
  EXPECT_EQ(plan::balanced_stage_layers(4, 4, 100.0), (std::vector<int>{1, 1, 1, 1}));
}

plan::Workload big_vocabulary() {
  plan::Workload w;
  w.model = model_preset("tiny");
  w.model.max_target_length = 16;
  w.model.vocab_size = 4096;
  w.global_batch = 16;
  w.dtype = "float32";
  w.remat_policy = "full";
  w.model_keys = "model_name=tiny max_target_length=16 vocab_size=4096";
  return w;
}

plan::Cluster two_devices() {
  return {.devices = 2,
          .devices_per_node = 2,
          .memory_bytes = 1e12,
          .peak_flops = 1e12,
          .intra_node_bytes_per_second = 1e11,
          .inter_node_bytes_per_second = 1e11,
          .compute_efficiency = 1.0,
          .measured = {}};
}

// Two 1f1b stages: the search's row for S = 2 holds [6, 2] (by hand, the split whose slower
// stage is fastest) at M = 16, one sequence per microbatch. Per layer f = 92672 x 16 / 1e12 s
// and b = 3f; a hand-off p = 16 x 64 x 4 bytes / 1e11 B/s. Stage 0 costs 6 layers, stage 1
// 2 + h. Stage 1 is the slower, and never waits: the next forward reaches it after stage 0's
// backward and forward, 24f + p, sooner than its own forward + backward, 4 (2 + h) f = 24.97f.
// So the step is stage 0's first forward, a hand-off, M x stage 1's forward + backward, a
// hand-off and stage 0's last backward: 6f + p + 16 x 4 (2 + h) f + p + 18f.
TEST(PlanStages, AnExpensiveHeadMakesTheLighterLastStageTheBestAndItIsFound) {
  const plan::Workload w = big_vocabulary();
  const plan::Cluster cluster = two_devices();
  const plan::SearchResult r = plan::search(w, cluster, {.top = 8, .schedules = {"1f1b"}});
  const auto pipeline = std::find_if(r.best.begin(), r.best.end(), [](const plan::Prediction& p) {
    return p.candidate.stages == 2;
  });
  ASSERT_NE(pipeline, r.best.end());
  const plan::Candidate& c = pipeline->candidate;
  EXPECT_EQ(c.stage_layers, (std::vector<int>{6, 2}));
  EXPECT_EQ(c.microbatches, 16);
  const double f = 92672.0 * 16 / 1e12, p = 16.0 * 64 * 4 / 1e11;
  const double h = 6.0 * 4096 * 64 / (4 * 92672.0);
  const double expected = 6 * f + p + 16 * 4 * (2 + h) * f + p + 18 * f;
  EXPECT_NEAR(pipeline->head_layers, h, 1e-12 * h);
  EXPECT_NEAR(pipeline->step_seconds, expected, 1e-9 * expected);

  // Every other split of the same candidate, and the even one, is slower.
  for (int first = 1; first <= 7; ++first) {
    if (first == 6) continue;
    plan::Candidate other = c;
    other.stage_layers = {first, 8 - first};
    if (first == 4) {  // the even split, as the search writes it
      other.stage_layers.clear();
      other.layers_per_stage = 4;
    }
    EXPECT_GT(plan::predict(w, cluster, other).step_seconds, pipeline->step_seconds)
        << "first stage of " << first << " layers";
  }

  // Its printed keys are that run: `carousel schedule` with them simulates the same step.
  std::vector<std::string> keys;
  std::istringstream in(pipeline->keys);
  for (std::string k; in >> k;) keys.push_back(k);
  EXPECT_NE(pipeline->keys.find("pipeline_stage_layers=6,2"), std::string::npos) << pipeline->keys;
  const Config cfg = load_config("", keys).config;
  EXPECT_EQ(cfg.stage_layer_counts(), (std::vector<int>{6, 2}));
  const double simulated = schedule::simulate(lowered_program(cfg), schedule_costs(cfg)).step_time;
  EXPECT_NEAR(simulated, pipeline->pipeline_seconds, 1e-5 * simulated);
}

// S = 3 does not divide 8 layers: only uneven stages make a 3-stage pipeline, and the search
// has it. At the tiny vocabulary the head is 6 x 256 x 64 / (4 x 92672) = 0.27 layers, so
// [3, 3, 2] (at most 3) beats [2, 3, 3] (3.27) and [4, 3, 1] (4).
TEST(PlanStages, AStageCountThatDoesNotDivideTheLayersIsPlannedUneven) {
  plan::Workload w = big_vocabulary();
  w.model.vocab_size = 256;
  w.global_batch = 3;
  plan::Cluster cluster = two_devices();
  cluster.devices = 3;
  cluster.devices_per_node = 3;
  const plan::SearchResult r = plan::search(w, cluster, {.top = 8, .schedules = {"1f1b"}});
  const auto three = std::find_if(r.best.begin(), r.best.end(), [](const plan::Prediction& p) {
    return p.candidate.stages == 3;
  });
  ASSERT_NE(three, r.best.end());
  EXPECT_EQ(three->candidate.stage_layers, (std::vector<int>{3, 3, 2}));
}

}  // namespace
}  // namespace carousel
