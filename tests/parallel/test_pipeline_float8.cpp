// test_pipeline_float8.cpp — float8 training (quantization=fp8, tensorwise; docs/float8.md) on
// meshes equals the one-device float8 run, and trains like bfloat16.
//
// Mesh equality runs in float32 compute, the CPU's float8 oracle (quantised values kept in
// float32, float32 GEMMs): each operand's scale comes from its whole tensor's amax (reduced over
// the tensor and context ranks), so every rank quantises exactly as one device does and only the
// summation order differs — step 0 to 1e-6, three steps to 1e-4, like the float32 layouts of
// tests/parallel/test_pipeline_tensor_context.cpp. (bfloat16 compute would add that file's 1e-2:
// the tensor ranks' partial sums rounded to bfloat16.) Data replicas and FSDP ranks quantise
// their own shares of a microbatch, so they equal one device running those shares as its
// microbatches. A scale from each rank's own part instead
// (the test switch) misses the one-device run by far more than 1e-4: the reduction is what makes
// the meshes equal. Convergence: the tiny model trained 20 steps in bfloat16 with and without
// float8 — finite, falling losses, the final loss within 2 % of bfloat16's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "host/run/trainer.h"
#include "models/parallel/float8_gemm.h"
#include "tests/support/pipeline_equivalence.h"
#include "tests/support/sequential_training.h"

namespace carousel {
namespace {

using testing::PipelineCase;
using testing::PipelineEquivalence;
using testing::run_config;

const std::string kFp8 = "quantization=fp8", M2 = "num_pipeline_microbatches=2",
                  M4 = "num_pipeline_microbatches=4", S2 = "ici_pipeline_parallelism=2",
                  L4 = "base_num_decoder_layers=4";

INSTANTIATE_TEST_SUITE_P(
    Float8, PipelineEquivalence,
    ::testing::Values(
        PipelineCase{"fp8_one_device", {kFp8, M2}, 1e-6},
        PipelineCase{"fp8_T2", {kFp8, M2, "ici_tensor_parallelism=2"}, 1e-6},
        PipelineCase{"fp8_C2", {kFp8, M2, "ici_context_parallelism=2"}, 1e-6},
        PipelineCase{
            "fp8_T2_C2", {kFp8, M2, "ici_tensor_parallelism=2", "ici_context_parallelism=2"}, 1e-6},
        PipelineCase{"fp8_circular_S2", {kFp8, S2, M4}, 1e-6},
        PipelineCase{
            "fp8_zb_h1_S2",  // deferred weight gradients (the W of an I/W split)
            {kFp8, S2, L4, "num_layers_per_pipeline_stage=2", "pipeline_schedule=zb_h1", M4},
            1e-6},
        PipelineCase{
            "fp8_interleaved_1f1b_S2", {kFp8, S2, "pipeline_schedule=interleaved_1f1b", M4}, 1e-6}),
    [](const auto& info) { return info.param.name; });

// Data replicas and FSDP ranks each compute their own share of a microbatch (sequences
// [m b + p b/P, ...) of P = D x F parts): those shares are the tensors they quantise, each with
// its own amax, as every anchor does (activations are per-rank tensors; FSDP gathers whole
// weights). So a D or F mesh equals one device that runs the same shares as its microbatches:
// M x P of them (the gradients then sum in another order: 1e-6, 1e-4).
TEST(Float8Training, DataAndFsdpRanksEqualOneDeviceOnTheirShares) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> meshes = {
      {{kFp8, "ici_data_parallelism=2", M2}, "num_pipeline_microbatches=4"},
      {{kFp8, S2, "ici_fsdp_parallelism=2", M4, "pipeline_fsdp_ag_per_repeat=true"},
       "num_pipeline_microbatches=8"},
      {{kFp8, "ici_data_parallelism=2", "ici_tensor_parallelism=2", M2},
       "num_pipeline_microbatches=4"}};
  for (const auto& [mesh, shares] : meshes) {
    SCOPED_TRACE(mesh[1]);
    const auto pipe = train(run_config(mesh)).steps;
    const auto single = train_sequentially(run_config({kFp8, shares}));
    expect_equal_training(pipe, single, 1e-6, /*later_norms=*/false, 1e-4);
  }
}

// The largest relative difference of the runs' losses from step `from` on.
double loss_gap(const std::vector<StepMetrics>& a, const std::vector<StepMetrics>& b,
                std::size_t from = 0) {
  double gap = 0;
  for (std::size_t s = from; s < std::min(a.size(), b.size()); ++s)
    gap = std::max(gap, std::abs(a[s].loss - b[s].loss) / b[s].loss);
  return gap;
}

// T=2 x C=2 against one device, with the amax reductions and with each rank's own amax (the test
// switch): step 0 (the same weights) isolates the quantisation — float32 rounding with the
// reductions, the other float8 grids without them — and the three steps' losses are the mesh
// test's 1e-4.
TEST(Float8Training, AShardLocalAmaxWouldMissTheOneDeviceRun) {
  const std::vector<std::string> mesh = {kFp8, M2, "ici_tensor_parallelism=2",
                                         "ici_context_parallelism=2", "run_name=fp8_local"};
  const auto single = train_sequentially(run_config({kFp8, M2}));
  set_float8_shard_local_amax_for_tests(true);
  const auto local = train(run_config(mesh)).steps;
  set_float8_shard_local_amax_for_tests(false);
  const auto whole = train(run_config(mesh)).steps;
  ASSERT_EQ(local.size(), 3u);
  ASSERT_EQ(whole.size(), 3u);
  const auto norm_gap = [&](const std::vector<StepMetrics>& run) {
    return std::abs(run[0].grad_norm - single[0].grad_norm) / single[0].grad_norm;
  };
  std::printf(
      "T=2 x C=2 float8 vs one device, relative gaps: whole-tensor amax: step-0 loss "
      "%.1e, step-0 gradient norm %.1e, 3 steps' losses %.1e; shard-local amax: %.1e, "
      "%.1e, %.1e\n",
      loss_gap({whole[0]}, {single[0]}), norm_gap(whole), loss_gap(whole, single),
      loss_gap({local[0]}, {single[0]}), norm_gap(local), loss_gap(local, single));
  EXPECT_LT(loss_gap({whole[0]}, {single[0]}), 1e-6);
  EXPECT_LT(norm_gap(whole), 1e-6);
  EXPECT_LT(loss_gap(whole, single), 1e-4);
  EXPECT_GT(loss_gap({local[0]}, {single[0]}), 1e-5) << "a shard-local amax would pass step 0";
  EXPECT_GT(norm_gap(local), 1e-4) << "a shard-local amax would pass step 0";
  EXPECT_GT(loss_gap(local, single), 1e-4) << "a shard-local amax would pass the mesh test";
}

TEST(Float8Training, TrainsLikeBfloat16) {
  const std::vector<std::string> keys = {"steps=20", "dtype=bfloat16", M2,
                                         "learning_rate_schedule_steps=20"};
  std::vector<std::string> fp8_keys = keys;
  fp8_keys.insert(fp8_keys.end(), {kFp8, "run_name=fp8_converges"});
  std::vector<std::string> bf16_keys = keys;
  bf16_keys.push_back("run_name=bf16_converges");
  const auto fp8 = train(run_config(fp8_keys)).steps, bf16 = train(run_config(bf16_keys)).steps;
  ASSERT_EQ(fp8.size(), 20u);
  for (const auto& m : fp8) ASSERT_TRUE(std::isfinite(m.loss)) << "step " << m.step;
  const double gap = std::abs(fp8.back().loss - bf16.back().loss) / bf16.back().loss;
  std::printf(
      "tiny model, 20 steps: loss %.4f -> %.4f in float8, %.4f -> %.4f in bfloat16 "
      "(final gap %.2f %%)\n",
      fp8.front().loss, fp8.back().loss, bf16.front().loss, bf16.back().loss, 100 * gap);
  EXPECT_LT(fp8.back().loss, 0.8 * fp8.front().loss);  // it learns
  EXPECT_LT(gap, 0.02);
}

}  // namespace
}  // namespace carousel
