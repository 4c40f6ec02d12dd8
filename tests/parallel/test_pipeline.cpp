// test_pipeline.cpp — pipeline training on simulated devices equals single-device training (the
// sequential oracle of tests/support/sequential_training.h).
//
// The contract of every schedule (docs/circular-pipeline.md#the-contract): the pipeline's loss and
// gradients are those of the sequential model — with FSDP, data parallelism, ZeRO-1, tied
// embeddings and bfloat16 on top too. Step 0's loss is compared bitwise (same math per
// microbatch, summed in the same order; 1e-6 with FSDP); later steps within 1e-4 relative,
// because the order in which microbatch gradients accumulate differs between schedules
// (circular runs the backward in reverse) and the gradient norm is summed per rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "compute/error.h"
#include "host/config/config.h"
#include "host/config/schedule_config.h"
#include "host/report/logging.h"
#include "host/run/trainer.h"
#include "host/schedule/passes.h"
#include "tests/support/checkpoint_files.h"
#include "tests/support/pipeline_equivalence.h"
#include "tests/support/sequential_training.h"

namespace carousel {
namespace {

using testing::PipelineCase;
using testing::PipelineEquivalence;
using testing::run_config;
using testing::with_global_batch_8;

std::vector<StepMetrics> run(const Config& cfg) { return train(cfg).steps; }

// A single-device run (named `run_name`, same global batch) that resumes the checkpoint of
// `step` from the run directory of `pipeline` and trains to its `steps`.
TrainResult resume_on_one_device(const Config& pipeline, const std::string& run_name, int step) {
  namespace fs = std::filesystem;
  Config single = pipeline;
  single.ici_pipeline_parallelism = single.ici_fsdp_parallelism = single.ici_data_parallelism = 1;
  single.ici_tensor_parallelism = single.ici_context_parallelism = 1;
  single = with_global_batch_8(single);
  single.run_name = run_name;
  fs::remove_all(single.run_directory());
  fs::create_directories(fs::path(single.run_directory()) / "checkpoints");
  const std::string dir = "checkpoints/" + std::to_string(step);
  fs::copy(fs::path(pipeline.run_directory()) / dir, fs::path(single.run_directory()) / dir,
           fs::copy_options::recursive);
  return train(single);
}

TEST_P(PipelineEquivalence, LossesMatchTheSingleDeviceRun) {
  const PipelineCase& c = GetParam();
  std::vector<std::string> reference_keys;
  for (const auto& k : c.keys) {
    if (k.rfind("ici_", 0) != 0 && k.rfind("pipeline_schedule", 0) != 0 &&
        k.rfind("num_pipeline_repeats", 0) != 0 && k.rfind("num_layers_per", 0) != 0 &&
        k.rfind("pipeline_microbatch_group", 0) != 0 && k.rfind("shard_optimizer", 0) != 0 &&
        k.rfind("pipeline_fsdp", 0) != 0 && k.rfind("pipeline_stage_layers", 0) != 0 &&
        k.rfind("pipeline_parallel_layers", 0) != 0) {
      reference_keys.push_back(k);
    }
  }
  const auto pipe = run(run_config(c.keys));
  const auto single = train_sequentially(run_config(reference_keys));
  expect_equal_training(pipe, single, c.first_rtol, /*later_norms=*/false, c.later_rtol);
}

// The held-out loss (eval_interval) of a pipeline with FSDP and BSW equals the sequential
// model's forward-only loss on the same batches with its weights after the same steps (1e-5:
// the weights agree to float32 rounding after two updates).
TEST(PipelineEval, EvalLossEqualsTheSequentialForwardOnlyLoss) {
  const std::vector<std::string> eval = {"eval_interval=2", "eval_steps=2", "steps=4"};
  std::vector<std::string> keys = {"ici_pipeline_parallelism=2",
                                   "ici_fsdp_parallelism=2",
                                   "num_layers_per_pipeline_stage=2",
                                   "pipeline_fsdp_ag_per_repeat=true",
                                   "num_pipeline_microbatches=4",
                                   "eval_dataset_path=" CAROUSEL_TEST_DATA_DIR "/tiny_corpus.txt"};
  keys.insert(keys.end(), eval.begin(), eval.end());
  std::vector<std::string> reference = {"num_pipeline_microbatches=4",
                                        "eval_dataset_path=" CAROUSEL_TEST_DATA_DIR
                                        "/tiny_corpus.txt"};
  reference.insert(reference.end(), eval.begin(), eval.end());
  const auto pipe = run(run_config(keys));
  const auto single = train_sequentially(run_config(reference));
  ASSERT_EQ(pipe.size(), 4u);
  for (std::size_t s = 0; s < 4; ++s) {
    if (s % 2 == 0) {
      EXPECT_EQ(pipe[s].eval_loss, -1) << "no evaluation after step " << s;
      continue;
    }
    ASSERT_GT(single[s].eval_loss, 0);
    EXPECT_NEAR(pipe[s].eval_loss, single[s].eval_loss, 1e-5 * single[s].eval_loss) << s;
  }
  EXPECT_LT(pipe[3].eval_loss, pipe[1].eval_loss);  // it learns
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, PipelineEquivalence,
    ::testing::Values(
        PipelineCase{"circular_S4_R2_M4",
                     {"ici_pipeline_parallelism=4", "num_pipeline_microbatches=4"}},
        PipelineCase{"circular_S4_R2_M8",
                     {"ici_pipeline_parallelism=4", "num_pipeline_microbatches=8"}},
        PipelineCase{"circular_S2_L2_R2_remat_none",
                     {"ici_pipeline_parallelism=2", "num_layers_per_pipeline_stage=2",
                      "num_pipeline_microbatches=4", "remat_policy=none"}},
        PipelineCase{"circular_S3_R1_M2",
                     {"ici_pipeline_parallelism=3", "base_num_decoder_layers=3",
                      "num_pipeline_microbatches=2"}},
        PipelineCase{"gpipe_S4",
                     {"ici_pipeline_parallelism=4", "base_num_decoder_layers=4",
                      "pipeline_schedule=gpipe", "num_pipeline_microbatches=8"}},
        PipelineCase{"1f1b_S4",
                     {"ici_pipeline_parallelism=4", "base_num_decoder_layers=8",
                      "num_layers_per_pipeline_stage=2", "pipeline_schedule=1f1b",
                      "num_pipeline_microbatches=8"}},
        PipelineCase{"interleaved_S2_R4",
                     {"ici_pipeline_parallelism=2", "pipeline_schedule=interleaved_1f1b",
                      "num_pipeline_microbatches=4"}},
        PipelineCase{
            "fsdp_circular_S2_F2_gather_every_use",
            {"ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2", "num_pipeline_microbatches=4"},
            1e-6},
        PipelineCase{"fsdp_circular_S2_F2_bsw",
                     {"ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2",
                      "num_pipeline_microbatches=4", "pipeline_fsdp_ag_per_repeat=true"},
                     1e-6},
        PipelineCase{"fsdp_circular_S2_F2_ag_once",
                     {"ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2",
                      "num_pipeline_microbatches=2", "pipeline_fsdp_ag_once=true"},
                     1e-6},
        PipelineCase{"fsdp_only_F4_bsw",
                     {"ici_fsdp_parallelism=4", "num_pipeline_microbatches=2",
                      "pipeline_fsdp_ag_per_repeat=true"},
                     1e-6},
        PipelineCase{"fsdp_1f1b_S2_F2_L4",
                     {"ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2",
                      "num_layers_per_pipeline_stage=4", "pipeline_schedule=1f1b",
                      "num_pipeline_microbatches=4", "pipeline_fsdp_ag_per_repeat=true"},
                     1e-6},
        PipelineCase{"zb_h1_S4",
                     {"ici_pipeline_parallelism=4", "base_num_decoder_layers=8",
                      "num_layers_per_pipeline_stage=2", "pipeline_schedule=zb_h1",
                      "num_pipeline_microbatches=8"}},
        PipelineCase{"zb_h1_S2_F2_bsw",
                     {"ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2",
                      "num_layers_per_pipeline_stage=4", "pipeline_schedule=zb_h1",
                      "num_pipeline_microbatches=4", "pipeline_fsdp_ag_per_repeat=true"},
                     1e-6},
        PipelineCase{
            "data_D2_S2",
            {"ici_data_parallelism=2", "ici_pipeline_parallelism=2", "num_pipeline_microbatches=2"},
            1e-6},
        PipelineCase{
            "data_only_D4", {"ici_data_parallelism=4", "num_pipeline_microbatches=2"}, 1e-6},
        PipelineCase{
            "bf16_circular_S4_R2_M4",
            {"ici_pipeline_parallelism=4", "num_pipeline_microbatches=4", "dtype=bfloat16"}},
        PipelineCase{
            "bf16_fsdp_circular_S2_F2_bsw",
            {"ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2", "num_pipeline_microbatches=4",
             "pipeline_fsdp_ag_per_repeat=true", "dtype=bfloat16"},
            1e-4},
        PipelineCase{"zero1_D2_S2",
                     {"ici_data_parallelism=2", "ici_pipeline_parallelism=2",
                      "num_pipeline_microbatches=2", "shard_optimizer_over_data=true"},
                     1e-6},
        PipelineCase{
            "zero1_D4_F2_bsw",
            {"ici_data_parallelism=4", "ici_fsdp_parallelism=2", "num_pipeline_microbatches=1",
             "pipeline_fsdp_ag_per_repeat=true", "shard_optimizer_over_data=true"},
            1e-6},
        // Tied embeddings: the first and the last stage's ranks both hold the table and sum
        // their gradients; FSDP-only keeps both uses on one rank.
        PipelineCase{"tied_circular_S4",
                     {"ici_pipeline_parallelism=4", "num_pipeline_microbatches=4",
                      "logits_via_embedding=true"}},
        PipelineCase{
            "tied_1f1b_S2_F2_D2",
            {"ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2",
             "num_layers_per_pipeline_stage=4", "ici_data_parallelism=2", "pipeline_schedule=1f1b",
             "num_pipeline_microbatches=2", "logits_via_embedding=true"},
            1e-6},
        PipelineCase{
            "tied_fsdp_only_F2",
            {"ici_fsdp_parallelism=2", "num_pipeline_microbatches=2", "logits_via_embedding=true"},
            1e-6},
        PipelineCase{
            "data_D2_S2_F2_bsw",
            {"ici_data_parallelism=2", "ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2",
             "num_pipeline_microbatches=2", "pipeline_fsdp_ag_per_repeat=true"},
            1e-6},
        // looped_bfs: loop placement, R stages per rank breadth-first; M < S waits at the turns.
        PipelineCase{"looped_bfs_S4_R2_M4",
                     {"ici_pipeline_parallelism=4", "pipeline_schedule=looped_bfs",
                      "num_pipeline_microbatches=4"}},
        PipelineCase{"looped_bfs_S3_R2_M2",
                     {"ici_pipeline_parallelism=3", "base_num_decoder_layers=6",
                      "pipeline_schedule=looped_bfs", "num_pipeline_microbatches=2"}},
        PipelineCase{"fsdp_looped_bfs_S2_F2_gather_every_use",
                     {"ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2",
                      "pipeline_schedule=looped_bfs", "num_pipeline_microbatches=4"},
                     1e-6},
        PipelineCase{
            "fsdp_looped_bfs_S2_F2_bsw",
            {"ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2", "pipeline_schedule=looped_bfs",
             "num_pipeline_microbatches=4", "pipeline_fsdp_ag_per_repeat=true"},
            1e-6},
        PipelineCase{
            "fsdp_looped_bfs_S2_F2_ag_once",
            {"ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2", "pipeline_schedule=looped_bfs",
             "num_pipeline_microbatches=4", "pipeline_fsdp_ag_once=true"},
            1e-6},
        PipelineCase{"looped_bfs_D2_S2",
                     {"ici_data_parallelism=2", "ici_pipeline_parallelism=2",
                      "pipeline_schedule=looped_bfs", "num_pipeline_microbatches=2"},
                     1e-6},
        // interleaved_zb: interleaved_1f1b's order with I/W split and zb_h1's W deferral.
        PipelineCase{"interleaved_zb_S2_R4",
                     {"ici_pipeline_parallelism=2", "pipeline_schedule=interleaved_zb",
                      "num_pipeline_microbatches=4"}},
        PipelineCase{"fsdp_interleaved_zb_S2_F2_gather_every_use",
                     {"ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2",
                      "pipeline_schedule=interleaved_zb", "num_pipeline_microbatches=4"},
                     1e-6},
        PipelineCase{"fsdp_interleaved_zb_S2_F2_bsw",
                     {"ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2",
                      "pipeline_schedule=interleaved_zb", "num_pipeline_microbatches=4",
                      "pipeline_fsdp_ag_per_repeat=true"},
                     1e-6},
        PipelineCase{"fsdp_interleaved_zb_S2_F2_ag_once",
                     {"ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2",
                      "pipeline_schedule=interleaved_zb", "num_pipeline_microbatches=4",
                      "pipeline_fsdp_ag_once=true"},
                     1e-6},
        PipelineCase{"interleaved_zb_D2_S2",
                     {"ici_data_parallelism=2", "ici_pipeline_parallelism=2",
                      "pipeline_schedule=interleaved_zb", "num_pipeline_microbatches=2"},
                     1e-6},
        // zbv: V placement (stage v on rank v, then 2S-1-v): the hand-offs run back up the ranks,
        // the turn is local, and rank 0 holds the first and the last stage (embedding and head).
        PipelineCase{"zbv_S2_L2_M4",
                     {"ici_pipeline_parallelism=2", "num_layers_per_pipeline_stage=2",
                      "pipeline_schedule=zbv", "num_pipeline_microbatches=4"}},
        PipelineCase{
            "zbv_S4_M8",
            {"ici_pipeline_parallelism=4", "pipeline_schedule=zbv", "num_pipeline_microbatches=8"}},
        PipelineCase{"fsdp_zbv_S2_F2_gather_every_use",
                     {"ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2",
                      "num_layers_per_pipeline_stage=2", "pipeline_schedule=zbv",
                      "num_pipeline_microbatches=4"},
                     1e-6},
        PipelineCase{"fsdp_zbv_S2_F2_bsw",
                     {"ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2",
                      "num_layers_per_pipeline_stage=2", "pipeline_schedule=zbv",
                      "num_pipeline_microbatches=4", "pipeline_fsdp_ag_per_repeat=true"},
                     1e-6},
        PipelineCase{"fsdp_zbv_S2_F2_ag_once",
                     {"ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2",
                      "num_layers_per_pipeline_stage=2", "pipeline_schedule=zbv",
                      "num_pipeline_microbatches=4", "pipeline_fsdp_ag_once=true"},
                     1e-6},
        PipelineCase{"zbv_D2_S2",
                     {"ici_data_parallelism=2", "ici_pipeline_parallelism=2",
                      "num_layers_per_pipeline_stage=2", "pipeline_schedule=zbv",
                      "num_pipeline_microbatches=4"},
                     1e-6},
        // Tied embeddings with V placement: both uses on rank 0, so no tie pair is formed.
        PipelineCase{
            "tied_zbv_S2",
            {"ici_pipeline_parallelism=2", "num_layers_per_pipeline_stage=2",
             "pipeline_schedule=zbv", "num_pipeline_microbatches=4", "logits_via_embedding=true"}}),
    [](const auto& info) { return info.param.name; });

// The executor gathers exactly what the schedule's lowering (and so `carousel schedule`)
// predicts: one gather per compute action by default, 2R - 2 per step with the Buffer Sliding
// Window on the circular schedule, R with ag_once.
TEST(Pipeline, WeightGathersMatchTheSchedulePrediction) {
  for (const std::string mode :
       {"", "pipeline_fsdp_ag_per_repeat=true", "pipeline_fsdp_ag_once=true"}) {
    std::vector<std::string> keys = {"ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2",
                                     "num_pipeline_microbatches=4"};
    if (!mode.empty()) keys.push_back(mode);
    const Config cfg = run_config(keys);
    const TrainResult r = train(cfg);
    const auto program =
        schedule::lower(schedule::generate(schedule_spec(cfg)), {cfg.weight_slots(), 0, true});
    const auto sim = schedule::simulate(program, schedule::Costs{});
    for (int device = 0; device < 4; ++device) {
      EXPECT_EQ(r.all_gathers_per_device[device], sim.all_gathers[device / 2] * cfg.steps)
          << mode << " device " << device;
    }
  }
  // R = 8 / 2 = 4 repeats, M = 4: 32 per step by default, 2R - 2 = 6 with BSW, R = 4 once.
}

TEST(Pipeline, TwoRunsAreBitwiseIdentical) {
  const Config cfg = run_config({"ici_pipeline_parallelism=4", "num_pipeline_microbatches=4"});
  const auto a = run(cfg), b = run(cfg);
  for (std::size_t s = 0; s < a.size(); ++s) {
    EXPECT_EQ(a[s].loss, b[s].loss);
    EXPECT_EQ(a[s].grad_norm, b[s].grad_norm);
  }
}

TEST(Pipeline, AMeshThatCannotSplitTheBatchIsAClearError) {
  auto error_of = [](std::vector<std::string> keys) {
    try {
      run(run_config(std::move(keys)));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  EXPECT_NE(error_of({"ici_pipeline_parallelism=2", "ici_fsdp_parallelism=3",
                      "num_pipeline_microbatches=4"})
                .find("each microbatch has 2 sequences (global batch 8 / 4 microbatches), which "
                      "ici_fsdp_parallelism x ici_data_parallelism x ici_expert_parallelism = 3 "
                      "x 1 x 1 ranks cannot split evenly"),
            std::string::npos);
}

// A pipeline checkpoint holds the whole model under global names: a pipeline run resumes from it
// bitwise, and a single-device run can resume from it too.
TEST(Pipeline, CheckpointsResumeExactlyAndAcrossLayouts) {
  namespace fs = std::filesystem;
  const std::vector<std::string> shape = {
      "ici_pipeline_parallelism=2", "num_pipeline_microbatches=2",
      "pipeline_schedule=1f1b",     "base_num_decoder_layers=2",
      "enable_checkpointing=true",  "learning_rate_schedule_steps=4"};
  Config straight = run_config(shape);
  straight.steps = 4;
  straight.run_name = "pipe_straight";
  Config resumed = straight;
  resumed.run_name = "pipe_resumed";
  resumed.steps = 2;
  fs::remove_all(straight.run_directory());
  fs::remove_all(resumed.run_directory());
  const auto full = run(straight);
  run(resumed);
  resumed.steps = 4;
  const TrainResult second = train(resumed);
  EXPECT_EQ(second.start_step, 2);
  ASSERT_EQ(second.steps.size(), 2u);
  EXPECT_EQ(second.steps[0].loss, full[2].loss);
  EXPECT_EQ(second.steps[1].loss, full[3].loss);
  EXPECT_EQ(testing::checkpoint_data_bytes(fs::path(straight.run_directory()) / "checkpoints/4"),
            testing::checkpoint_data_bytes(fs::path(resumed.run_directory()) / "checkpoints/4"));
  // The checkpoint is layout-free: a single-device run resumes the pipeline's step-2 checkpoint
  // and continues like the pipeline did (not bitwise: the gradient norm is summed in another
  // order, which moves the clipping scale in its last bits).
  const TrainResult cross = resume_on_one_device(resumed, "single_from_pipeline", 2);
  EXPECT_EQ(cross.start_step, 2);
  ASSERT_EQ(cross.steps.size(), 2u);
  EXPECT_NEAR(cross.steps[0].loss, full[2].loss, 1e-5 * full[2].loss);
  EXPECT_NEAR(cross.steps[1].loss, full[3].loss, 1e-5 * full[3].loss);
}

// Trains `pipeline_keys` for 4 steps (checkpoints every 2) as `name`_pipe, resumes its step-2
// checkpoint on one device as `name`_single, and expects steps 3 and 4 to match (1e-5: the
// gradient norm is summed in another order).
void expect_resumes_on_one_device(std::vector<std::string> pipeline_keys, const std::string& name) {
  namespace fs = std::filesystem;
  pipeline_keys.insert(pipeline_keys.end(),
                       {"enable_checkpointing=true", "learning_rate_schedule_steps=4"});
  Config pipe = run_config(pipeline_keys);
  pipe.steps = 4;
  pipe.checkpoint_period = 2;
  pipe.run_name = name + "_pipe";
  fs::remove_all(pipe.run_directory());
  const auto full = run(pipe);
  const TrainResult resumed = resume_on_one_device(pipe, name + "_single", 2);
  EXPECT_EQ(resumed.start_step, 2);
  ASSERT_EQ(resumed.steps.size(), 2u);
  EXPECT_NEAR(resumed.steps[0].loss, full[2].loss, 1e-5 * full[2].loss);
  EXPECT_NEAR(resumed.steps[1].loss, full[3].loss, 1e-5 * full[3].loss);
}

// Tied embeddings: the pipeline's checkpoint holds the one shared table (written by the first
// stage's rank; the last stage's copy is identical), so a single-device run resumes it and
// continues like the pipeline did (1e-5: the gradient norm is summed in another order).
TEST(Pipeline, TiedCheckpointResumesOnOneDevice) {
  expect_resumes_on_one_device(
      {"ici_pipeline_parallelism=2", "num_pipeline_microbatches=2", "logits_via_embedding=true"},
      "tied");
}

// zbv with tied embeddings: rank 0 holds both the first and the last stage, so the table has
// one owner and no copy; its checkpoint (stages written by the ranks rank_of names) resumes on
// one device and continues like the pipeline did.
TEST(Pipeline, ZbvTiedCheckpointResumesOnOneDevice) {
  expect_resumes_on_one_device(
      {"ici_pipeline_parallelism=2", "num_layers_per_pipeline_stage=2", "pipeline_schedule=zbv",
       "num_pipeline_microbatches=4", "logits_via_embedding=true"},
      "zbv_tied");
}

// Each writing rank writes its own part: 2 stages x 2 FSDP ranks of replica 0 write 4 parts
// (the other replica writes none), each well under half the model — no rank gathers it — and the
// parts together are the whole model: a single-device run resumes them and continues like the
// mesh did (1e-5: the gradient norm is summed in another order).
TEST(Pipeline, EveryWritingRankWritesItsOwnPartOfTheCheckpoint) {
  namespace fs = std::filesystem;
  expect_resumes_on_one_device({"ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2",
                                "ici_data_parallelism=2", "shard_optimizer_over_data=true",
                                "num_pipeline_microbatches=1", "base_num_decoder_layers=4"},
                               "parts");
  Config pipe = run_config({"base_num_decoder_layers=4"});
  pipe.run_name = "parts_pipe";
  const fs::path dir = fs::path(pipe.run_directory()) / "checkpoints" / "2";
  const auto files = checkpoint_data_files(dir.string());
  ASSERT_EQ(files.size(), 8u);  // model and optimizer parts of 4 writers
  std::uintmax_t model_bytes = 0, largest = 0;
  for (int k = 0; k < 4; ++k) {
    const fs::path part = dir / fmt::format("model-{:05}-of-00004.safetensors", k + 1);
    ASSERT_TRUE(fs::exists(part)) << part;
    model_bytes += fs::file_size(part);
    largest = std::max(largest, fs::file_size(part));
    EXPECT_TRUE(fs::exists(dir / fmt::format("optimizer-{:05}-of-00004.safetensors", k + 1)));
  }
  EXPECT_LT(largest, model_bytes / 2) << "a part holds half the model or more";
  const auto tensors = testing::checkpoint_tensors(dir);
  EXPECT_EQ(tensors.size(), 3 * param_table(pipe.model).size());  // parameters and 2 moments
}

// ZeRO-1 changes where AdamW state lives, not the math: the replicas' gradient sums are the
// same rank-order sums (reduce-scatter instead of all-reduce) and AdamW is elementwise, so
// its checkpoints are byte-identical to plain data parallelism's, also when it resumes from
// its own checkpoint (moments gathered over the replicas to save, scattered to load), while
// each rank holds 1/D of the moments.
TEST(Pipeline, ZeroOneEqualsDataParallelAndHoldsLess) {
  namespace fs = std::filesystem;
  Config plain = run_config({"ici_data_parallelism=2", "ici_pipeline_parallelism=2",
                             "ici_fsdp_parallelism=2", "num_pipeline_microbatches=1",
                             "enable_checkpointing=true", "learning_rate_schedule_steps=4"});
  plain.steps = 4;
  plain.run_name = "dp_plain";
  Config zero = plain;
  zero.shard_optimizer_over_data = true;
  zero.run_name = "dp_zero1";
  zero.steps = 2;
  fs::remove_all(plain.run_directory());
  fs::remove_all(zero.run_directory());
  const TrainResult a = train(plain);
  const TrainResult first = train(zero);
  zero.steps = 4;
  const TrainResult second = train(zero);
  EXPECT_EQ(second.start_step, 2);
  EXPECT_EQ(testing::checkpoint_data_bytes(fs::path(plain.run_directory()) / "checkpoints/4"),
            testing::checkpoint_data_bytes(fs::path(zero.run_directory()) / "checkpoints/4"));
  EXPECT_LT(first.peak_device_bytes, a.peak_device_bytes);
}

}  // namespace
}  // namespace carousel
