// test_plan_layout.cpp — evaluating a given layout with `carousel plan`: every axis pinned
// evaluates exactly that candidate; a pinned layout that cannot exist is one error naming the
// nearest valid values; one that does not fit is reported, with by how much; any device count;
// --explain's parts add up to the step and match the hand-worked compute and reduction; the
// JSON carries the figures and the layout; the progress callback; the GPT-style MLP's counts.
//
// The model is the tiny preset at T = 16 in float32 (tests/support/plan_workload.h): V 256, E 64,
// N 8, H 4, Hkv 2, Fm 172; per layer 45 440 parameters (45 312 in matmuls), extras 32 832;
// forward FLOPs per token and layer 2 x 45 312 + 2 T E = 92 672; the head 6 V E = 98 304.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "compute/error.h"
#include "host/plan/plan_explain.h"
#include "host/plan/plan_report.h"
#include "host/plan/plan_search.h"
#include "models/params.h"
#include "tests/support/plan_workload.h"
#include "tests/support/test_util.h"

namespace carousel {
namespace {

constexpr double kLayerParams = 45440, kExtras = 32832, kLayers = 8;
constexpr double kForwardPerToken = 92672, kHeadPerToken = 98304;

plan::Cluster cluster(int devices, int per_node, double inter = 1e12, double memory = 1e12) {
  return {.devices = devices,
          .devices_per_node = per_node,
          .memory_bytes = memory,
          .peak_flops = 1e12,
          .intra_node_bytes_per_second = 1e12,
          .inter_node_bytes_per_second = inter,
          .compute_efficiency = 1.0,
          .measured = {}};
}

// S = 2 x F = 2 on 4 devices, M = 4, 1f1b, BSW: every axis and knob given.
plan::SearchOptions pinned_s2_f2() {
  plan::SearchOptions o{.top = 5, .schedules = {"1f1b"}};
  o.tensor = o.context = 1;
  o.pins = {.stages = 2, .fsdp = 2, .data = 1, .microbatches = 4, .repeats = 1, .weights = "bsw"};
  o.report_unfit = true;
  return o;
}

TEST(PlanLayout, DivisorsOfAnyCountAndTheNearestOnes) {
  for (const std::int64_t n : {1, 2, 12, 97, 768, 6144, 16384}) {
    std::vector<std::int64_t> brute;
    for (std::int64_t d = 1; d <= n; ++d)
      if (n % d == 0) brute.push_back(d);
    EXPECT_EQ(plan::divisors(n), brute) << n;
  }
  EXPECT_EQ(plan::nearest_divisors(768, 50), (std::vector<std::int64_t>{48, 64}));
  EXPECT_EQ(plan::nearest_divisors(768, 48), (std::vector<std::int64_t>{48}));
  EXPECT_EQ(plan::nearest_divisors(768, 1000), (std::vector<std::int64_t>{768}));
}

// Everything pinned: one candidate, the one plan::predict gives for it.
TEST(PlanLayout, EveryAxisPinnedEvaluatesExactlyThatLayout) {
  const plan::Workload w = testing::tiny_plan_workload(16);
  const plan::Cluster c = cluster(4, 4);
  const plan::SearchResult r = plan::search(w, c, pinned_s2_f2());
  EXPECT_EQ(r.candidates, 1);
  ASSERT_EQ(r.best.size(), 1u);
  const plan::Candidate& got = r.best[0].candidate;
  EXPECT_EQ(got.stages, 2);
  EXPECT_EQ(got.fsdp, 2);
  EXPECT_EQ(got.data, 1);
  EXPECT_EQ(got.microbatches, 4);
  EXPECT_EQ(got.repeats, 1);
  EXPECT_EQ(got.weight_slots, 2);
  EXPECT_EQ(got.schedule, "1f1b");
  EXPECT_EQ(r.best[0].step_seconds, plan::predict(w, c, got).step_seconds);
  // Uneven stages and the pipelined layers pinned too.
  plan::SearchOptions o = pinned_s2_f2();
  o.pins.repeats = 2;
  o.pins.stage_layers = {1, 3, 3, 1};
  o.schedules = {"interleaved_1f1b"};
  const plan::SearchResult u = plan::search(w, c, o);
  ASSERT_EQ(u.best.size(), 1u);
  EXPECT_EQ(u.best[0].candidate.stage_layers, (std::vector<int>{1, 3, 3, 1}));
  EXPECT_NE(u.best[0].keys.find("pipeline_stage_layers=1,3,3,1"), std::string::npos);
  o = pinned_s2_f2();
  o.schedules = {"gpipe"};
  o.pins.repeats = 0;
  o.pins.pipeline_layers = 6;  // 6 layers in 2 stages of 3, layers 6 and 7 after the pipeline
  const plan::SearchResult p = plan::search(w, c, o);
  ASSERT_FALSE(p.best.empty());
  EXPECT_EQ(p.best[0].candidate.pipeline_layers, 6);
  EXPECT_EQ(p.best[0].candidate.layers_per_stage * p.best[0].candidate.repeats * 2, 6);
  EXPECT_NE(p.best[0].keys.find("pipeline_parallel_layers=6"), std::string::npos);
}

// A device count with a factor 3 (12 = 3 x 4 devices, 3 nodes of 4): the meshes with 3 in them
// are searched, and a pinned one evaluates.
TEST(PlanLayout, ADeviceCountWithAFactorOfThreeIsSearched) {
  const plan::Workload w = testing::tiny_plan_workload(24);
  const plan::Cluster c = cluster(12, 4);
  const plan::SearchResult r = plan::search(w, c, {.top = 1000, .schedules = {}});
  std::set<int> data;
  for (const plan::Prediction& p : r.best) data.insert(p.candidate.data * p.candidate.fsdp);
  EXPECT_TRUE(data.count(3) || data.count(6) || data.count(12));
  plan::SearchOptions o{.top = 1, .schedules = {"1f1b"}};
  o.tensor = o.context = 1;
  o.pins = {.stages = 2, .fsdp = 1, .data = 6, .microbatches = 2, .repeats = 1};
  const plan::SearchResult one = plan::search(w, c, o);
  ASSERT_EQ(one.best.size(), 1u);
  EXPECT_EQ(one.best[0].candidate.data, 6);
}

std::string error_of_pins(const plan::Workload& w, const plan::Cluster& c,
                          const plan::SearchOptions& o) {
  return testing::error_of([&] { plan::search(w, c, o); });
}

TEST(PlanLayout, ALayoutThatCannotExistIsOneErrorWithTheNearestValidValues) {
  const plan::Workload w = testing::tiny_plan_workload(16);
  const plan::Cluster c = cluster(8, 8);
  plan::SearchOptions o{.top = 1, .schedules = {}};
  o.pins.stages = 3;
  EXPECT_EQ(error_of_pins(w, c, o),
            "the pinned layout --stages=3 x --expert=1 = 3 devices does not divide --devices=8; "
            "nearest valid, changing one with the others as given: --stages=2 or 4");
  o = {.top = 1, .schedules = {}};
  o.tensor = o.context = 1;
  o.pins = {.stages = 2, .fsdp = 2, .data = 4};
  EXPECT_EQ(error_of_pins(w, c, o),
            "the pinned layout --stages=2 x --fsdp=2 x --data=4 x --expert=1 x --tensor=1 x "
            "--context=1 = 16 devices differs from --devices=8; nearest valid, changing one with "
            "the others as given: --stages=1; --fsdp=1; --data=2");
  o.pins = {.stages = 1, .fsdp = 2, .data = 4};
  const plan::Workload twelve = testing::tiny_plan_workload(12);
  EXPECT_NE(error_of_pins(twelve, c, o)
                .find("a global batch of 12 sequences does not split over --fsdp=2 x --data=4 x "
                      "--expert=1 = 8 ranks (each holds whole sequences); nearest valid: "
                      "--global-batch=8 or 16"),
            std::string::npos);
  o.pins.microbatches = 3;  // each of the 8 ranks holds 2 sequences
  EXPECT_EQ(error_of_pins(w, c, o),
            "--microbatches=3 does not divide the 2 sequences each of the --fsdp=2 x --data=4 x "
            "--expert=1 ranks holds (global batch 16); nearest valid: --microbatches=2");
  o = {.top = 1, .schedules = {}};
  o.pins = {.stages = 2, .repeats = 3, .even_stages = true};
  EXPECT_EQ(error_of_pins(w, c, o),
            "the model's 8 layers do not divide into --stages=2 x --repeats=3 = 6 even stages; "
            "nearest valid: --repeats=2 or 4");
  o.pins = {.stages = 2, .stage_layers = {1, 3, 3}};
  EXPECT_EQ(error_of_pins(w, c, o),
            "--stage-layers=1,3,3 adds up to 7 layers, but the pipeline runs 8 (the model's 8 "
            "layers)");
  o.pins = {.stages = 3, .stage_layers = {1, 3, 3, 1}};
  EXPECT_NE(error_of_pins(w, cluster(6, 6), o)
                .find("--stage-layers=1,3,3,1 lists 4 stages, which --stages=3 ranks cannot hold "
                      "equally (S x R stages); nearest valid: --stages=2 or 4"),
            std::string::npos);
  o.pins = {.fsdp = 1, .weights = "bsw"};
  EXPECT_NE(error_of_pins(w, c, o).find("--weights=bsw is an FSDP weight mode, but --fsdp=1"),
            std::string::npos);
  o.pins = {.weights = "sometimes"};
  EXPECT_NE(error_of_pins(w, c, o).find("--weights=sometimes is not an FSDP weight mode; use "
                                        "per_use"),
            std::string::npos);
}

// Device memory one byte short of the pinned S = 2 x F = 2 candidate: reported with fits false,
// one byte over; without report_unfit the search refuses it as before.
TEST(PlanLayout, APinnedLayoutThatDoesNotFitIsReportedWithByHowMuch) {
  const plan::Workload w = testing::tiny_plan_workload(16);
  const double need =
      double(plan::search(w, cluster(4, 4), pinned_s2_f2()).best.at(0).memory.total());
  const plan::SearchResult r = plan::search(w, cluster(4, 4, 1e12, need - 1), pinned_s2_f2());
  ASSERT_EQ(r.best.size(), 1u);
  EXPECT_TRUE(r.unfit);
  EXPECT_FALSE(r.best[0].fits);
  EXPECT_EQ(r.best[0].memory_over_bytes(), 1.0);
  plan::SearchOptions refuse = pinned_s2_f2();
  refuse.report_unfit = false;
  EXPECT_TRUE(plan::search(w, cluster(4, 4, 1e12, need - 1), refuse).best.empty());
  // Far too small for even the state: refused before simulating, still reported.
  const plan::SearchResult tiny = plan::search(w, cluster(4, 4, 1e12, 1e4), pinned_s2_f2());
  ASSERT_EQ(tiny.best.size(), 1u);
  EXPECT_FALSE(tiny.best[0].fits);
  EXPECT_GT(tiny.best[0].memory_over_bytes(), 0.0);
}

// Two replicas on a fast link (no pipeline, no FSDP): compute is each device's half of the
// batch at 1 TFLOP/s (remat=full: 4 forwards a layer, plus the head), the data-parallel
// reduction ZeRO-1's reduce-scatter and all-gather of the layers' halves plus the extras'
// all-reduce, in float32 over 1 TB/s; nothing else.
TEST(PlanLayout, ExplainAddsUpAndMatchesTheHandWorkedCompute) {
  const plan::Workload w = testing::tiny_plan_workload(16);
  const plan::Cluster c = cluster(2, 1);
  plan::SearchOptions o{.top = 1, .schedules = {"1f1b"}};
  o.tensor = o.context = 1;
  o.pins = {.stages = 1, .fsdp = 1, .data = 2, .microbatches = 1, .repeats = 1};
  const plan::Prediction p = plan::search(w, c, o).best.at(0);
  const plan::StepBreakdown b =
      plan::explain_step(c, plan::cost_candidate(c, p.candidate, plan::candidate_config(w, p.candidate)));
  const double compute = 16.0 * 16 / 2 * (kLayers * 4 * kForwardPerToken + kHeadPerToken) / 1e12;
  const double reduction = (2 * kLayers * kLayerParams / 2 * 4 + 2 * 0.5 * kExtras * 4) / 1e12;
  EXPECT_NEAR(b.step, p.step_seconds, 1e-12 * p.step_seconds);
  EXPECT_NEAR(b.compute, compute, 1e-9 * compute);
  EXPECT_NEAR(b.forward + b.backward, compute, 1e-9 * compute);
  EXPECT_NEAR(b.bubble, 0.0, 1e-12);
  EXPECT_NEAR(b.reductions.data, reduction, 1e-9 * reduction);
  for (const double part : {b.fsdp, b.p2p, b.tensor, b.context, b.expert, b.reductions.extras,
                            b.reductions.stage_sum})
    EXPECT_EQ(part, 0.0);
  // A pipeline with FSDP and tensor parallelism on a slow link: every part accounted for.
  const plan::Cluster slow = cluster(8, 4, 1e9);
  plan::SearchOptions t{.top = 1, .schedules = {"1f1b"}};
  t.tensor = 2;
  t.context = 1;
  t.pins = {.stages = 2, .fsdp = 2, .data = 1, .microbatches = 4, .repeats = 1, .weights = "per_use"};
  const plan::Prediction q = plan::search(w, slow, t).best.at(0);
  const plan::StepBreakdown e = plan::explain_step(
      slow, plan::cost_candidate(slow, q.candidate, plan::candidate_config(w, q.candidate)));
  const double sum = e.compute + e.bubble + e.fsdp + e.p2p + e.tensor + e.context + e.expert +
                     e.reductions.total();
  EXPECT_NEAR(sum, q.step_seconds, 1e-12 * q.step_seconds);
  EXPECT_GT(e.tensor, 0.0);
  EXPECT_GT(e.p2p + e.fsdp, 0.0);
  EXPECT_GT(e.bubble, 0.0);
}

// --json's per-candidate figures and layout, the old fields kept.
TEST(PlanLayout, JsonCarriesTheFiguresAndTheFullLayout) {
  const plan::Workload w = testing::tiny_plan_workload(16);
  const plan::Cluster c = cluster(4, 4);
  const plan::Prediction p = plan::search(w, c, pinned_s2_f2()).best.at(0);
  const nlohmann::json j = plan::candidate_json(p, w);
  EXPECT_EQ(j.at("step_seconds").get<double>(), p.step_seconds);
  EXPECT_EQ(j.at("tokens_per_second").get<double>(), 16.0 * 16 / p.step_seconds);
  // Model FLOPs: 6 x (layers' and lm_head's matmul parameters) + 6 N T E, per token.
  const double flops = 6 * (kLayers * 45312 + 256 * 64) + 6 * kLayers * 16 * 64;
  EXPECT_NEAR(j.at("tflops_per_device").get<double>(),
              flops * 16 * 16 / p.step_seconds / 4 / 1e12, 1e-9);
  EXPECT_NEAR(j.at("mfu").get<double>(), flops * 16 * 16 / p.step_seconds / 4 / 1e12, 1e-9);
  EXPECT_EQ(j.at("peak_memory_bytes").get<std::int64_t>(), p.memory.total());
  EXPECT_TRUE(j.at("fits").get<bool>());
  const nlohmann::json& l = j.at("layout");
  EXPECT_EQ(l.at("stages"), 2);
  EXPECT_EQ(l.at("fsdp"), 2);
  EXPECT_EQ(l.at("data"), 1);
  EXPECT_EQ(l.at("tensor"), 1);
  EXPECT_EQ(l.at("context"), 1);
  EXPECT_EQ(l.at("expert"), 1);
  EXPECT_EQ(l.at("microbatches"), 4);
  EXPECT_EQ(l.at("repeats"), 1);
  EXPECT_EQ(l.at("layers_per_stage"), 4);
  EXPECT_EQ(l.at("schedule"), "1f1b");
  EXPECT_EQ(l.at("weights"), "bsw");
  EXPECT_EQ(l.at("remat"), "full");
  EXPECT_TRUE(l.at("pipeline_layers").is_null());
  for (const char* old : {"S", "F", "D", "T", "C", "M", "R", "L", "bubble", "memory_bytes",
                          "bytes_per_step", "keys", "weight_mode", "exposed_comm_seconds"})
    EXPECT_TRUE(j.contains(old)) << old;
  const plan::StepBreakdown b = plan::explain_step(
      c, plan::cost_candidate(c, p.candidate, plan::candidate_config(w, p.candidate)));
  const nlohmann::json e = plan::candidate_json(p, w, &b);
  EXPECT_EQ(e.at("breakdown_seconds").at("step").get<double>(), b.step);
  EXPECT_TRUE(e.at("breakdown_seconds").at("optimizer").is_null());  // not modelled
}

TEST(PlanLayout, ProgressIsReportedWhileTheSearchRuns) {
  const plan::Workload w = testing::tiny_plan_workload(16);
  std::vector<plan::SearchProgress> seen;
  bool best_seen = false;
  plan::SearchOptions o{.top = 3, .schedules = {}};
  o.progress_seconds = 0;  // every step
  o.progress = [&](const plan::SearchProgress& p) {
    seen.push_back(p);
    best_seen |= p.best != nullptr;
  };
  const plan::SearchResult r = plan::search(w, cluster(4, 4), o);
  ASSERT_GT(seen.size(), 2u);
  EXPECT_TRUE(seen.front().enumerating);
  EXPECT_FALSE(seen.back().enumerating);
  EXPECT_TRUE(best_seen);
  for (std::size_t i = 1; i < seen.size(); ++i) {
    EXPECT_GE(seen[i].simulated, seen[i - 1].simulated);
    EXPECT_GE(seen[i].elapsed_seconds, seen[i - 1].elapsed_seconds);
  }
  EXPECT_LE(seen.back().simulated, r.simulated);
  EXPECT_NE(plan::progress_line(seen.back()).find("candidates simulated"), std::string::npos);
}

// The GPT-style MLP: two matrices of Fm columns instead of three; by hand, 8 layers x 172 x 64
// fewer parameters, 2 E Fm fewer forward FLOPs per token and layer.
TEST(PlanLayout, TheGptStyleMlpHasTwoMatrices) {
  plan::Workload llama = testing::tiny_plan_workload(16), gpt = llama;
  gpt.model.decoder_block = plan::kGptBlock;
  auto count = [](const ModelConfig& m) {
    double n = 0;
    for (const ParamSpec& s : plan::table_of(m)) n += double(numel(s.shape));
    return n;
  };
  EXPECT_EQ(count(llama.model) - count(gpt.model), kLayers * 172 * 64);
  EXPECT_EQ(plan::layer_forward_flops_per_token(llama.model) -
                plan::layer_forward_flops_per_token(gpt.model),
            2.0 * 64 * 172);
  EXPECT_DOUBLE_EQ(plan::model_flops_per_token(llama.model), train_flops_per_token(llama.model));
  EXPECT_EQ(plan::model_flops_per_token(llama.model) - plan::model_flops_per_token(gpt.model),
            6.0 * kLayers * 172 * 64);
  // Saved activations without remat: fc1's output and the GeLU's, one [tokens, Fm] fewer than
  // SwiGLU's gate, up and act per layer (float32, one microbatch of 16 x 16 tokens stashed).
  const plan::Cluster c = cluster(1, 1);
  llama.remat_policy = gpt.remat_policy = "none";
  const plan::Candidate one{.microbatches = 1, .layers_per_stage = 8, .schedule = "1f1b"};
  const plan::Prediction a = plan::predict(llama, c, one), b = plan::predict(gpt, c, one);
  EXPECT_EQ(a.memory.activations - b.memory.activations, std::int64_t(kLayers * 256 * 172 * 4));
  EXPECT_NE(testing::error_of([&] {
              plan::Workload moe = gpt;
              moe.model.num_experts = 4;
              plan::table_of(moe.model);
            }).find("the GPT-style MLP is dense only"),
            std::string::npos);
}

// The launch line carries the data keys of --config's file (dataset_*, eval_*, tokenizer_path,
// steps; not its other keys, nor defaults), quoted when the shell would split them; without
// --config, or with a file that sets no dataset_type, it says plainly that it trains on
// synthetic data and which keys to add. A file that does not load is one error naming it.
TEST(PlanLayout, TheLaunchLineCarriesTheConfigsDataKeysOrSaysWhichToAdd) {
  const plan::Workload w = testing::tiny_plan_workload(16);
  const plan::Cluster c = cluster(4, 4);
  const plan::Prediction p = plan::search(w, c, pinned_s2_f2()).best.at(0);
  const std::string bare = plan::launch_text(p, c, w, nullptr);
  EXPECT_NE(bare.find("carousel train device=cuda " + p.keys + "\n"), std::string::npos) << bare;
  EXPECT_NE(bare.find("SYNTHETIC"), std::string::npos) << bare;
  for (const char* key : {"dataset_type=tokens", "dataset_path=", "tokenizer_path=", "steps="})
    EXPECT_NE(bare.find(key), std::string::npos) << key << " in " << bare;

  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("plan_launch_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string yml = (dir / "run.yml").string();
  {
    std::ofstream f(yml);
    f << "dataset_type: tokens\ndataset_path: /data/my shards/*.bin\n"
         "tokenizer_path: /data/tok.json\nsteps: 1000\neval_interval: 50\n"
         "eval_dataset_path: /data/val.bin\nlearning_rate: 0.001\n";
  }
  const std::vector<std::string> keys = plan::launch_data_keys(yml);
  EXPECT_EQ(keys, (std::vector<std::string>{"steps=1000", "dataset_type=tokens",
                                            "'dataset_path=/data/my shards/*.bin'",
                                            "tokenizer_path=/data/tok.json", "eval_interval=50",
                                            "eval_dataset_path=/data/val.bin"}));
  const std::string line = plan::launch_text(p, c, w, &keys);
  EXPECT_NE(line.find(p.keys + " steps=1000 dataset_type=tokens"), std::string::npos) << line;
  EXPECT_EQ(line.find("SYNTHETIC"), std::string::npos) << line;
  EXPECT_EQ(line.find("learning_rate"), std::string::npos) << line;

  {
    std::ofstream f(yml);
    f << "steps: 10\n";
  }
  const std::vector<std::string> only_steps = plan::launch_data_keys(yml);
  EXPECT_NE(plan::launch_text(p, c, w, &only_steps).find("SYNTHETIC"), std::string::npos);
  {
    std::ofstream f(yml);
    f << "no_such_key: 1\n";
  }
  EXPECT_NE(testing::error_of([&] { plan::launch_data_keys(yml); }).find("--config=" + yml),
            std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace carousel
