// test_pipeline.cpp — pipeline training on simulated devices equals single-device training.
//
// The contract of every schedule (maxtext-pipeline-spec.md §4.8): the pipeline's loss and
// gradients are those of the sequential model. Step 0's loss is compared bitwise (same math per
// microbatch, summed in the same order); later steps within 1e-4 relative, because the order in
// which microbatch gradients accumulate differs between schedules (circular runs the backward
// in reverse) and the gradient norm is summed per rank.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "cuda/error.h"
#include "host/config.h"
#include "host/logging.h"
#include "host/trainer.h"

namespace carousel {
namespace {

Config run_config(std::vector<std::string> overrides) {
  init_logging({.rank = 0, .level = "warn", .file_dir = {}});
  std::vector<std::string> base = {"max_target_length=16", "per_device_batch_size=8",
                                   "steps=3", "enable_checkpointing=false",
                                   "learning_rate=0.003", "dataset_type=text",
                                   "dataset_path=" CAROUSEL_TEST_DATA_DIR "/tiny_corpus.txt",
                                   "base_output_directory=/tmp/carousel_pipeline_tests"};
  base.insert(base.end(), overrides.begin(), overrides.end());
  return load_config("", base).config;
}

std::vector<StepMetrics> run(const Config& cfg) { return train(cfg).steps; }

struct PipelineCase {
  std::string name;
  std::vector<std::string> keys;  // pipeline keys; the reference drops S, keeps M and layers
};

void PrintTo(const PipelineCase& c, std::ostream* os) { *os << c.name; }

class PipelineEquivalence : public ::testing::TestWithParam<PipelineCase> {};

TEST_P(PipelineEquivalence, LossesMatchTheSingleDeviceRun) {
  const PipelineCase& c = GetParam();
  std::vector<std::string> reference_keys;
  for (const auto& k : c.keys) {
    if (k.rfind("ici_pipeline_parallelism", 0) != 0 && k.rfind("pipeline_schedule", 0) != 0 &&
        k.rfind("num_pipeline_repeats", 0) != 0 && k.rfind("num_layers_per", 0) != 0 &&
        k.rfind("pipeline_microbatch_group", 0) != 0) {
      reference_keys.push_back(k);
    }
  }
  const auto pipe = run(run_config(c.keys));
  const auto single = run(run_config(reference_keys));
  ASSERT_EQ(pipe.size(), single.size());
  EXPECT_EQ(pipe[0].loss, single[0].loss) << "step 0 loss must be bitwise equal";
  EXPECT_NEAR(pipe[0].grad_norm, single[0].grad_norm, 1e-6 * single[0].grad_norm);
  for (std::size_t s = 1; s < pipe.size(); ++s) {
    EXPECT_NEAR(pipe[s].loss, single[s].loss, 1e-4 * single[s].loss) << "step " << s;
  }
  EXPECT_LT(pipe.back().loss, pipe.front().loss);  // it trains
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, PipelineEquivalence,
    ::testing::Values(
        PipelineCase{"circular_S4_R2_M4", {"ici_pipeline_parallelism=4", "num_pipeline_microbatches=4"}},
        PipelineCase{"circular_S4_R2_M8", {"ici_pipeline_parallelism=4", "num_pipeline_microbatches=8"}},
        PipelineCase{"circular_S2_L2_R2_remat_none",
                     {"ici_pipeline_parallelism=2", "num_layers_per_pipeline_stage=2",
                      "num_pipeline_microbatches=4", "remat_policy=none"}},
        PipelineCase{"circular_S3_R1_M2", {"ici_pipeline_parallelism=3",
                                           "base_num_decoder_layers=3",
                                           "num_pipeline_microbatches=2"}},
        PipelineCase{"gpipe_S4", {"ici_pipeline_parallelism=4", "base_num_decoder_layers=4",
                                  "pipeline_schedule=gpipe", "num_pipeline_microbatches=8"}},
        PipelineCase{"1f1b_S4", {"ici_pipeline_parallelism=4", "base_num_decoder_layers=8",
                                 "num_layers_per_pipeline_stage=2", "pipeline_schedule=1f1b",
                                 "num_pipeline_microbatches=8"}},
        PipelineCase{"interleaved_S2_R4", {"ici_pipeline_parallelism=2",
                                           "pipeline_schedule=interleaved_1f1b",
                                           "num_pipeline_microbatches=4"}}),
    [](const auto& info) { return info.param.name; });

TEST(Pipeline, TwoRunsAreBitwiseIdentical) {
  const Config cfg = run_config({"ici_pipeline_parallelism=4", "num_pipeline_microbatches=4"});
  const auto a = run(cfg), b = run(cfg);
  for (std::size_t s = 0; s < a.size(); ++s) {
    EXPECT_EQ(a[s].loss, b[s].loss);
    EXPECT_EQ(a[s].grad_norm, b[s].grad_norm);
  }
}

TEST(Pipeline, WhatIsNotExecutedYetIsAClearError) {
  auto error_of = [](std::vector<std::string> keys) {
    try {
      run(run_config(std::move(keys)));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  EXPECT_NE(error_of({"ici_pipeline_parallelism=4", "base_num_decoder_layers=4",
                      "pipeline_schedule=zb_h1", "num_pipeline_microbatches=4"})
                .find("zb_h1 needs the I/W split"),
            std::string::npos);
  EXPECT_NE(error_of({"ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2"})
                .find("FSDP inside stages is not executed yet"),
            std::string::npos);
}

// A pipeline checkpoint holds the whole model under global names: a pipeline run resumes from it
// bitwise, and a single-device run can resume from it too.
TEST(Pipeline, CheckpointsResumeExactlyAndAcrossLayouts) {
  namespace fs = std::filesystem;
  auto read = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::vector<char>(std::istreambuf_iterator<char>(in), {});
  };
  const std::vector<std::string> shape = {"ici_pipeline_parallelism=2", "num_pipeline_microbatches=2",
                                          "pipeline_schedule=1f1b", "base_num_decoder_layers=2",
                                          "enable_checkpointing=true", "learning_rate_schedule_steps=4"};
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
  for (const char* f : {"model.safetensors", "optimizer.safetensors"}) {
    EXPECT_EQ(read(fs::path(straight.run_directory()) / "checkpoints/4" / f),
              read(fs::path(resumed.run_directory()) / "checkpoints/4" / f)) << f;
  }
  // The checkpoint is layout-free: a single-device run resumes the pipeline's step-2 checkpoint
  // and continues like the pipeline did (not bitwise: the gradient norm is summed in another
  // order, which moves the clipping scale in its last bits).
  Config single = straight;
  single.ici_pipeline_parallelism = 1;
  single.run_name = "single_from_pipeline";
  fs::remove_all(single.run_directory());
  fs::create_directories(fs::path(single.run_directory()) / "checkpoints");
  fs::copy(fs::path(resumed.run_directory()) / "checkpoints/2",
           fs::path(single.run_directory()) / "checkpoints/2", fs::copy_options::recursive);
  const TrainResult cross = train(single);
  EXPECT_EQ(cross.start_step, 2);
  ASSERT_EQ(cross.steps.size(), 2u);
  EXPECT_NEAR(cross.steps[0].loss, full[2].loss, 1e-5 * full[2].loss);
  EXPECT_NEAR(cross.steps[1].loss, full[3].loss, 1e-5 * full[3].loss);
}

}  // namespace
}  // namespace carousel
