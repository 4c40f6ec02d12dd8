// test_plan_costs.cpp — `carousel plan --costs-file`: measured costs scaled to a candidate
// (host/plan/plan_costs.h) against a step worked out by hand, against the prediction a profiled
// run made from its own trace (which `carousel schedule` reproduces from the same file), and
// every way a file can fail to fit the plan refused with one error.
//
// The model is the tiny preset at T = 16 (V 256, E 64, N 8, 45440 parameters per layer) in
// float32 with remat=full.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "compute/error.h"
#include "host/config/config.h"
#include "host/config/schedule_config.h"
#include "host/plan/plan_model.h"
#include "host/report/logging.h"
#include "host/run/trainer.h"
#include "host/schedule/simulate.h"
#include "tests/support/plan_workload.h"
#include "tests/support/profiled_run.h"
#include "tests/support/test_util.h"

namespace carousel {
namespace {

namespace fs = std::filesystem;

fs::path scratch(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("carousel_plan_costs_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// A costs file as a profiled run writes it, typed by hand: microseconds per layer, measured on
// the tiny model at T = 16 with one sequence per microbatch, S = 2 and F = 2 (so the head, the
// hand-off and the collectives were all measured).
const char* kHandFile = R"(# schedule_costs.yml typed for the test
schedule_cost_f: 10
schedule_cost_b: 20
schedule_cost_w: 10
schedule_cost_all_gather: 2
schedule_cost_reduce_scatter: 4
schedule_cost_head: 0.5
schedule_cost_p2p: 3
measured_decoder_block: llama
measured_vocab_size: 256
measured_base_emb_dim: 64
measured_base_num_query_heads: 4
measured_base_num_kv_heads: 2
measured_base_mlp_dim: 172
measured_logits_via_embedding: false
measured_max_target_length: 16
measured_dtype: float32
measured_remat_policy: full
measured_device: cpu
measured_base_num_decoder_layers: 4
measured_ici_pipeline_parallelism: 2
measured_ici_fsdp_parallelism: 2
measured_microbatch_sequences: 1
measured_head: true
)";

std::string write(const fs::path& path, const std::string& text) {
  std::ofstream(path) << text;
  return path.string();
}

// S stages of L layers, F-way FSDP, M microbatches; 1f1b, no replicas.
plan::Candidate even_stages(int stages, int fsdp, int microbatches, int layers_per_stage) {
  plan::Candidate c;
  c.stages = stages;
  c.fsdp = fsdp;
  c.microbatches = microbatches;
  c.layers_per_stage = layers_per_stage;
  return c;
}

plan::Cluster cluster_of(int devices, int per_node, const std::string& costs_file) {
  plan::Cluster c{.devices = devices,
                  .devices_per_node = per_node,
                  .memory_bytes = 1e12,
                  .peak_flops = 1e12,
                  .intra_node_bytes_per_second = 1e11,
                  .inter_node_bytes_per_second = 1e10,
                  .compute_efficiency = 1.0,
                  .measured = {}};
  if (!costs_file.empty()) c.measured = plan::read_measured_costs(costs_file);
  return c;
}

// 1f1b on two devices of one node, M = 2 microbatches of 2 sequences (a global batch of 4):
// twice the measured microbatch, so per layer f = 20, b = 40 us and a hand-off of 6 us. Stage 0
// runs 4 layers (F 80, B 160), stage 1 4 layers and the head's 0.5 (F 90, B 180). By hand:
//   stage 0: F0 [0, 80], F1 [80, 160]
//   stage 1: F0 [86, 176], B0 [176, 356], F1 [356, 446] (its input came at 166), B1 [446, 626]
//   stage 0: B0 [362, 522] (after stage 1's B0 + 6), B1 [632, 792]
// so 792 us, with no replicas and no FSDP: nothing exposed after it. Busy 480 + 540 us of
// 2 x 792: a bubble of 1 - 1020 / 1584.
TEST(PlanCosts, MeasuredCostsScaledToACandidateGiveTheHandWorkedStep) {
  const fs::path dir = scratch("hand");
  const plan::Cluster cluster = cluster_of(2, 2, write(dir / "costs.yml", kHandFile));
  const plan::Candidate c = even_stages(2, 1, 2, 4);
  const plan::Prediction p = plan::predict(testing::tiny_plan_workload(4), cluster, c);
  EXPECT_NEAR(p.step_seconds, 792e-6, 1e-12);
  EXPECT_NEAR(p.pipeline_seconds, 792e-6, 1e-12);
  EXPECT_EQ(p.exposed_comm_seconds, 0);
  EXPECT_NEAR(p.bubble, 1 - 1020.0 / 1584, 1e-9);
  EXPECT_EQ(p.head_layers, 0.5);
}

// The other scalings, on the costed config: FSDP over 4 devices that span two nodes of 2
// (F0 = 2 measured on one node): the ring's share (3/4) / (1/2) and the link's 1e11 / 1e10, so
// gathers 2 x 1.5 x 10 = 30 us and reduce-scatters 60 us per layer; the pipeline hop crosses
// nodes too: 3 us x 1 sequence x 10. A file measured with F = 1 and S = 1 leaves the gathers,
// the hand-off and the head to the FLOP model: 3/4 of a layer's 45440 float32 parameters over
// 1e10 B/s, one [16, 64] float32 activation over it, and 6 V E / (4 x 92672) layers.
TEST(PlanCosts, CollectivesAndHandOffsScaleWithTheGroupAndTheLink) {
  const fs::path dir = scratch("scale");
  const plan::Workload w = testing::tiny_plan_workload(8);
  const plan::Candidate c = even_stages(2, 4, 2, 4);
  plan::Cluster cluster = cluster_of(8, 2, write(dir / "costs.yml", kHandFile));
  const plan::CostedCandidate costed =
      plan::cost_candidate(cluster, c, plan::candidate_config(w, c));
  EXPECT_NEAR(costed.cfg.schedule_cost_f, 10e-6, 1e-18);
  EXPECT_NEAR(costed.cfg.schedule_cost_all_gather, 30e-6, 1e-17);
  EXPECT_NEAR(costed.cfg.schedule_cost_reduce_scatter, 60e-6, 1e-17);
  EXPECT_NEAR(costed.cfg.schedule_cost_p2p, 30e-6, 1e-17);

  std::string unmeasured = kHandFile;
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"ici_pipeline_parallelism: 2",
                                                                     "ici_pipeline_parallelism: 1"},
                                 {"ici_fsdp_parallelism: 2", "ici_fsdp_parallelism: 1"},
                                 {"measured_head: true", "measured_head: false"}}) {
    unmeasured.replace(unmeasured.find(from), from.size(), to);
  }
  cluster = cluster_of(8, 2, write(dir / "unmeasured.yml", unmeasured));
  const plan::CostedCandidate model =
      plan::cost_candidate(cluster, c, plan::candidate_config(w, c));
  EXPECT_NEAR(model.cfg.schedule_cost_f, 10e-6, 1e-18);  // compute is still the file's
  EXPECT_NEAR(model.cfg.schedule_cost_all_gather, 0.75 * 45440 * 4 / 1e10, 1e-18);
  EXPECT_NEAR(model.cfg.schedule_cost_p2p, 16.0 * 64 * 4 / 1e10, 1e-18);
  EXPECT_NEAR(model.cfg.schedule_cost_head, 6.0 * 256 * 64 / (4 * 92672.0), 1e-12);
}

// A profiled 2-stage run writes schedule_costs.yml with its measured_* keys; planning that very
// mesh with the file predicts the span the run predicted from its own trace (in ms; the file's
// 9 significant digits: 1e-6 relative), and so what `carousel schedule` simulates with
// schedule_costs_file (tests/run/test_cost_calibration.cpp checks those two agree). A candidate
// with microbatches of twice the sequences is what `carousel schedule` gives with the per-layer
// times and the hand-off doubled.
TEST(PlanCosts, AProfiledRunsFilePredictsWhatTheRunAndCarouselSchedulePredict) {
  init_logging({.rank = 0, .level = "error", .file_dir = {}});
  const fs::path dir = scratch("run");
  const std::vector<std::string> keys = testing::profiled_two_stage_run(dir.string());
  const TrainResult r = train(load_config("", keys).config);
  ASSERT_FALSE(r.costs_path.empty());

  plan::Workload w = testing::tiny_plan_workload(8);
  w.model.num_layers = 4;
  const plan::Cluster cluster = cluster_of(2, 2, r.costs_path);
  EXPECT_TRUE(cluster.measured->head_measured);
  EXPECT_EQ(cluster.measured->microbatch_sequences, 2);
  const plan::Candidate same = even_stages(2, 1, 4, 2);
  const plan::Prediction p = plan::predict(w, cluster, same);
  EXPECT_NEAR(p.pipeline_seconds * 1e3, r.predicted_span_ms, 1e-6 * r.predicted_span_ms);
  std::vector<std::string> with_file = keys;
  with_file.push_back("schedule_costs_file=" + r.costs_path);
  const Config measured = load_config("", with_file).config;
  const double scheduled =
      schedule::simulate(lowered_program(measured), schedule_costs(measured)).step_time;
  EXPECT_NEAR(p.pipeline_seconds * 1e6, scheduled, 1e-9 * scheduled);

  plan::Candidate halved = same;
  halved.microbatches = 2;  // 4 sequences per microbatch: twice the measured 2
  std::vector<std::string> doubled = with_file;
  doubled.push_back("num_pipeline_microbatches=2");
  for (const auto& [key, value] : {std::pair{"schedule_cost_f", measured.schedule_cost_f},
                                   {"schedule_cost_b", measured.schedule_cost_b},
                                   {"schedule_cost_w", measured.schedule_cost_w},
                                   {"schedule_cost_p2p", measured.schedule_cost_p2p}}) {
    doubled.push_back(fmt::format("{}={:.17g}", key, 2 * value));
  }
  const Config twice = load_config("", doubled).config;
  const double expected =
      schedule::simulate(lowered_program(twice), schedule_costs(twice)).step_time;
  EXPECT_NEAR(plan::predict(w, cluster, halved).pipeline_seconds * 1e6, expected, 1e-9 * expected);
}

TEST(PlanCosts, AFileThatDoesNotFitThePlanIsOneClearError) {
  const fs::path dir = scratch("errors");
  const plan::MeasuredCosts m = plan::read_measured_costs(write(dir / "costs.yml", kHandFile));
  ModelConfig wider = m.on.model;
  wider.emb_dim = 128;
  wider.max_target_length = 32;
  EXPECT_EQ(testing::error_of([&] { plan::check_measured_on(m, wider, "float32", "full"); }),
            fmt::format("--costs-file='{}' was measured on another workload: base_emb_dim=64 "
                        "(this plan: 128), max_target_length=16 (this plan: 32). Its per-layer "
                        "costs scale to other microbatch sizes, FSDP degrees and layer counts, "
                        "not to other layer shapes, vocabularies, sequence lengths, dtypes or "
                        "remat policies; measure this workload: a profiled run "
                        "(profiler_steps=N) with base_emb_dim=128 max_target_length=32 (fewer "
                        "layers will do) writes <run dir>/schedule_costs.yml",
                        m.path));
  // What the planner's own flags can fix, it names.
  const std::string flags =
      testing::error_of([&] { plan::check_measured_on(m, m.on.model, "bfloat16", "none"); });
  EXPECT_NE(flags.find("plan with --dtype=float32 --remat=full, or measure this workload"),
            std::string::npos)
      << flags;
  // A different layer count is what the costs scale to: no error.
  ModelConfig deeper = m.on.model;
  deeper.num_layers = 32;
  plan::check_measured_on(m, deeper, "float32", "full");

  // A file without what it was measured on (as written before the planner read them).
  const std::string costs_only =
      std::string(kHandFile).substr(0, std::string(kHandFile).find("measured_decoder_block"));
  const std::string old = write(dir / "old.yml", costs_only);
  EXPECT_NE(testing::error_of([&] {
              plan::read_measured_costs(old);
            }).find("lacks measured_decoder_block, measured_vocab_size"),
            std::string::npos);
  std::string without_f = kHandFile;
  without_f.erase(without_f.find("schedule_cost_f: 10\n"),
                  std::string("schedule_cost_f: 10\n").size());
  const std::string partial = write(dir / "partial.yml", without_f);
  EXPECT_NE(testing::error_of([&] {
              plan::read_measured_costs(partial);
            }).find("lacks schedule_cost_f: the planner needs every schedule_cost_* key"),
            std::string::npos);
  const std::string extra =
      write(dir / "extra.yml", std::string(kHandFile) + "measured_colour: red\n");
  EXPECT_NE(testing::error_of([&] {
              plan::read_measured_costs(extra);
            }).find("sets 'measured_colour', which is not a measured_* key"),
            std::string::npos);
  std::string zero = kHandFile;
  zero.replace(zero.find("microbatch_sequences: 1"), 23, "microbatch_sequences: 0");
  EXPECT_NE(testing::error_of([&] {
              plan::read_measured_costs(write(dir / "zero.yml", zero));
            }).find("measured_microbatch_sequences=0 is not valid: it must be at least 1"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] {
              plan::read_measured_costs((dir / "absent.yml").string());
            }).find("does not exist"),
            std::string::npos);
  // `carousel schedule` reads the same file: the measured_* keys are not config keys to it.
  EXPECT_EQ(load_config("", {"schedule_costs_file=" + (dir / "costs.yml").string()})
                .config.schedule_cost_f,
            10);
}

}  // namespace
}  // namespace carousel
