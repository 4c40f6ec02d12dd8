// pipeline_equivalence.h — the equality of a pipeline run with the single-device run, as a
// parameterised test: `PipelineEquivalence.LossesMatchTheSingleDeviceRun` (its body is in
// tests/parallel/test_pipeline.cpp) runs each PipelineCase on its mesh and compares its losses
// with the sequential oracle's (tests/support/sequential_training.h). A schedule's cases may
// live in a file of their own in the test_pipeline binary
// (tests/parallel/test_pipeline_<name>.cpp):
//   INSTANTIATE_TEST_SUITE_P(Name, PipelineEquivalence, ::testing::Values(PipelineCase{...}),
//                            [](const auto& info) { return info.param.name; });
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "host/config/config.h"
#include "host/report/logging.h"
#include "host/run/trainer.h"

namespace carousel::testing {

// Every run here trains on a global batch of 8 sequences, whatever its number of devices
// (B = per_device_batch_size x devices, as in MaxText).
inline Config with_global_batch_8(Config c) {
  c.per_device_batch_size = 8.0 / double(c.num_devices());
  c.validate();
  return c;
}

inline Config run_config(std::vector<std::string> overrides) {
  init_logging({.rank = 0, .level = "warn", .file_dir = {}});
  std::vector<std::string> base = {"max_target_length=16",
                                   "steps=3",
                                   "enable_checkpointing=false",
                                   "learning_rate=0.003",
                                   "dataset_type=text",
                                   "dataset_path=" CAROUSEL_TEST_DATA_DIR "/tiny_corpus.txt",
                                   "base_output_directory=/tmp/carousel_pipeline_tests",
                                   "run_name=pipeline"};
  base.insert(base.end(), overrides.begin(), overrides.end());
  return with_global_batch_8(load_config("", base).config);
}

// The mixture-of-experts model the layout tests train: four experts of width 32, top-2, a shared
// expert, a dense first layer, the balancing loss; then `keys`.
inline std::vector<std::string> moe_top2_shared(std::vector<std::string> keys) {
  std::vector<std::string> all = {
      "num_experts=4",         "base_moe_mlp_dim=32", "first_num_dense_layers=1",
      "num_experts_per_tok=2", "shared_experts=1",    "load_balance_loss_weight=0.01"};
  all.insert(all.end(), keys.begin(), keys.end());
  return all;
}

// Trains `from` for 4 steps (checkpoints every 2), then resumes its step-2 checkpoint with the
// mesh of `to` (the same model, batch and microbatches) and returns both runs' losses of steps
// 3 and 4.
inline std::pair<std::vector<double>, std::vector<double>> resume_across(
    std::vector<std::string> from, std::vector<std::string> to, const std::string& name) {
  namespace fs = std::filesystem;
  for (auto* keys : {&from, &to}) {
    keys->insert(keys->end(), {"enable_checkpointing=true", "learning_rate_schedule_steps=4",
                               "steps=4", "checkpoint_period=2", "num_pipeline_microbatches=2"});
  }
  Config first = run_config(from), second = run_config(to);
  first.run_name = name + "_from";
  second.run_name = name + "_to";
  fs::remove_all(first.run_directory());
  fs::remove_all(second.run_directory());
  const TrainResult straight = train(first);
  fs::create_directories(fs::path(second.run_directory()) / "checkpoints");
  fs::copy(fs::path(first.run_directory()) / "checkpoints/2",
           fs::path(second.run_directory()) / "checkpoints/2", fs::copy_options::recursive);
  const TrainResult resumed = train(second);
  EXPECT_EQ(resumed.start_step, 2);
  std::pair<std::vector<double>, std::vector<double>> out;
  for (std::size_t s = 2; s < straight.steps.size(); ++s)
    out.first.push_back(straight.steps[s].loss);
  for (const auto& m : resumed.steps) out.second.push_back(m.loss);
  return out;
}

// Each mesh resumes the checkpoint of the one before it (the first the last's), each continuing
// like its straight run within 1e-5 (gradients summed in another order). `name` prefixes the
// run directories.
inline void expect_resumes_in_a_cycle(const std::vector<std::vector<std::string>>& meshes,
                                      const std::string& name) {
  for (std::size_t i = 0; i < meshes.size(); ++i) {
    const auto& from = meshes[(i + meshes.size() - 1) % meshes.size()];
    const auto [straight, resumed] = resume_across(from, meshes[i], name + std::to_string(i));
    ASSERT_EQ(resumed.size(), 2u) << i;
    for (std::size_t s = 0; s < 2; ++s)
      EXPECT_NEAR(resumed[s], straight[s], 1e-5 * straight[s]) << i;
  }
}

struct PipelineCase {
  std::string name;
  std::vector<std::string> keys;  // pipeline keys; the reference drops S, F, keeps M and layers
  // Relative tolerance of step 0's loss and gradient norm; 0: the loss is bitwise equal. With
  // FSDP each rank computes part of a microbatch (other GEMM shapes, a split loss sum), so
  // step 0 agrees to float32 rounding (1e-6); in bfloat16 those float32 differences sometimes
  // flip a bf16 rounding (2^-8 of that element), 1e-4.
  double first_rtol = 0;
  // Relative tolerance of the later steps' losses: 1e-4 in float32 (microbatch gradients summed
  // in another order); bfloat16 with tensor parallelism, 1e-2 (partial sums rounded to bfloat16
  // before the tensor ranks add them, then amplified by two updates).
  double later_rtol = 1e-4;
};

inline void PrintTo(const PipelineCase& c, std::ostream* os) { *os << c.name; }

class PipelineEquivalence : public ::testing::TestWithParam<PipelineCase> {};

}  // namespace carousel::testing
