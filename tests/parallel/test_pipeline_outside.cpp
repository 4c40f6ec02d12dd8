// test_pipeline_outside.cpp — layers outside the pipeline (pipeline_parallel_layers): the stages
// split the first P layers, the rest, the final norm and the head run after the pipeline on every
// stage rank (microbatch m on rank m % S). Each case trains like the single-device model
// (PipelineEquivalence, tests/support/pipeline_equivalence.h): the loss and the gradient norm at
// step 0 (1e-6: the outside gradients are summed over the stage ranks, the losses on several
// ranks, in another order) and the later losses. The tiny model has 8 layers.
#include <string>
#include <vector>

#include "tests/support/pipeline_equivalence.h"
#include "tests/support/sequential_training.h"

namespace carousel {
namespace {

using testing::moe_top2_shared;
using testing::PipelineCase;
using testing::PipelineEquivalence;

const std::string S2 = "ici_pipeline_parallelism=2", S4 = "ici_pipeline_parallelism=4",
                  M2 = "num_pipeline_microbatches=2", M4 = "num_pipeline_microbatches=4",
                  gpipe = "pipeline_schedule=gpipe", P4 = "pipeline_parallel_layers=4",
                  P6 = "pipeline_parallel_layers=6";

const std::string E2 = "ici_expert_parallelism=2";

INSTANTIATE_TEST_SUITE_P(
    Outside, PipelineEquivalence,
    ::testing::Values(
        PipelineCase{"outside_gpipe_S2_P4", {S2, gpipe, P4, M4}, 1e-6},
        PipelineCase{"outside_gpipe_S2_P2_M2", {S2, gpipe, "pipeline_parallel_layers=2", M2}, 1e-6},
        PipelineCase{"outside_circular_S2_R2_P4", {S2, P4, M4}, 1e-6},
        PipelineCase{"outside_circular_S2_R3_P6_delay",
                     {S2, P6, "pipeline_delay_activation_forwarding=true"},
                     1e-6},
        // Fewer microbatches than stage ranks: ranks 2 and 3 run nothing outside.
        PipelineCase{"outside_circular_S4_P4_M2", {S4, P4, M2}, 1e-6},
        PipelineCase{
            "outside_looped_bfs_S2_P6", {S2, P6, "pipeline_schedule=looped_bfs", M4}, 1e-6},
        PipelineCase{"outside_uneven_S2_P5",
                     {S2, gpipe, "pipeline_parallel_layers=5", "pipeline_stage_layers=[2,3]", M4},
                     1e-6},
        PipelineCase{"outside_all_but_one_S2_P7",
                     {S2, gpipe, "pipeline_parallel_layers=7", "pipeline_stage_layers=[3,4]", M4},
                     1e-6},
        // FSDP (the outside layers whole on each FSDP rank, their moments split), each weight
        // mode; data replicas with ZeRO-1.
        PipelineCase{"outside_fsdp_S2_F2", {S2, P4, M4, "ici_fsdp_parallelism=2"}, 1e-6},
        PipelineCase{"outside_fsdp_S2_F2_bsw",
                     {S2, P4, M4, "ici_fsdp_parallelism=2", "pipeline_fsdp_ag_per_repeat=true"},
                     1e-6},
        PipelineCase{"outside_fsdp_S2_F2_ag_once",
                     {S2, gpipe, P4, M4, "ici_fsdp_parallelism=2", "pipeline_fsdp_ag_once=true"},
                     1e-6},
        PipelineCase{"outside_D2_S2_zero1",
                     {S2, P4, M2, "ici_data_parallelism=2", "shard_optimizer_over_data=true"},
                     1e-6},
        PipelineCase{"outside_tensor_T2_S2", {S2, P4, M4, "ici_tensor_parallelism=2"}, 1e-6},
        PipelineCase{
            "outside_context_C2_S2", {S2, gpipe, P4, M4, "ici_context_parallelism=2"}, 1e-6},
        // The tied table: every stage rank multiplies by a copy, summed with the embedding's use.
        PipelineCase{"outside_tied_S2", {S2, P4, M4, "logits_via_embedding=true"}, 1e-6},
        PipelineCase{"outside_tied_S4_M4", {S4, P4, M4, "logits_via_embedding=true"}, 1e-6},
        PipelineCase{"outside_packing_S2", {S2, P4, M4, "packing=true", "eos_id=10"}, 1e-6},
        PipelineCase{"outside_remat_none_S2", {S2, P4, M4, "remat_policy=none"}, 1e-6},
        PipelineCase{"outside_bf16_S2", {S2, P4, M4, "dtype=bfloat16"}, 1e-4, 1e-2},
        // Mixture of experts: MoE layers outside (their routing counted where they run), the
        // dense first layer and MoE layers in the pipeline; the loss-free bias moved by loads
        // from both places.
        PipelineCase{
            "outside_moe_S2_P4",
            {S2, P4, M4, "num_experts=4", "base_moe_mlp_dim=32", "first_num_dense_layers=1",
             "num_experts_per_tok=2", "shared_experts=1", "load_balance_loss_weight=0.01"},
            1e-6},
        PipelineCase{"outside_moe_bias_S2_P6",
                     {S2, P6, M4, "num_experts=4", "base_moe_mlp_dim=32", "num_experts_per_tok=2",
                      "routed_score_func=sigmoid", "norm_topk_prob=true", "routed_bias=true",
                      "routed_bias_update_rate=0.02"},
                     1e-6},
        // Expert parallelism in the OUTSIDE actions: their MoE layers exchange rows with the
        // expert ranks of the same stage rank (an A2A before each); the routed experts after the
        // pipeline are each expert rank's own, summed over its replicas and the stage ranks.
        PipelineCase{"outside_moe_E2_S2_P4", moe_top2_shared({S2, P4, M4, E2}), 1e-6},
        PipelineCase{
            "outside_moe_E4_S2_P6_top1",
            moe_top2_shared({S2, P6, M2, "ici_expert_parallelism=4", "num_experts_per_tok=1"}),
            1e-6},
        PipelineCase{
            "outside_moe_E2_D2_S2_F2_zero1",
            moe_top2_shared({S2, P4, "num_pipeline_microbatches=1", E2, "ici_data_parallelism=2",
                             "ici_fsdp_parallelism=2", "shard_optimizer_over_data=true"}),
            1e-6},
        PipelineCase{"outside_moe_E2_T2_S2_circular",
                     moe_top2_shared({S2, P4, M4, E2, "ici_tensor_parallelism=2"}), 1e-6},
        PipelineCase{
            "outside_moe_E2_S2_remat_none_bias",
            moe_top2_shared({S2, gpipe, P4, M4, E2, "remat_policy=none", "routed_bias=true",
                             "routed_bias_update_rate=0.02", "load_balance_loss_weight=0"}),
            1e-6}),
    [](const auto& info) { return info.param.name; });

// The held-out loss (eval_interval) runs the OUTSIDE actions forward only: it equals the
// sequential model's forward-only loss with its weights after the same steps (1e-5, float32
// rounding after two updates).
TEST(OutsideEval, EvalLossEqualsTheSequentialForwardOnlyLoss) {
  const std::vector<std::string> eval = {"eval_interval=2", "eval_steps=2", "steps=4", M4,
                                         "eval_dataset_path=" CAROUSEL_TEST_DATA_DIR
                                         "/tiny_corpus.txt"};
  std::vector<std::string> keys = {S2, P4, "ici_fsdp_parallelism=2"};
  keys.insert(keys.end(), eval.begin(), eval.end());
  const auto pipe = train(testing::run_config(keys)).steps;
  const auto single = train_sequentially(testing::run_config(eval));
  ASSERT_EQ(pipe.size(), 4u);
  for (std::size_t s = 1; s < 4; s += 2) {
    ASSERT_GT(single[s].eval_loss, 0);
    EXPECT_NEAR(pipe[s].eval_loss, single[s].eval_loss, 1e-5 * single[s].eval_loss) << s;
  }
}

// A run checkpointed with every layer pipelined resumes with layers outside the pipeline (the
// same tensors by name, whoever holds them) and back, continuing like the straight run (1e-5:
// gradients summed in another order).
TEST(OutsideCheckpoint, ResumesAcrossPipelinedLayers) {
  const std::vector<std::vector<std::string>> meshes = {
      {S2, gpipe, "num_layers_per_pipeline_stage=4"},
      {S2, gpipe, P4},
      {S4, "pipeline_parallel_layers=4", "ici_fsdp_parallelism=2"},
  };
  testing::expect_resumes_in_a_cycle(meshes, "outside_across_");
}

// MoE with layers outside the pipeline resumes across expert degrees: each expert rank's
// routed experts after the pipeline are written under their global names (by the first replica
// of that expert rank) and read back by whoever holds them.
TEST(OutsideCheckpoint, ResumesAcrossExpertDegrees) {
  const std::vector<std::vector<std::string>> meshes = {
      moe_top2_shared({S2, gpipe, P4, E2}),
      moe_top2_shared({S2, P4, "ici_expert_parallelism=4"}),
      moe_top2_shared({"ici_expert_parallelism=2", "ici_data_parallelism=2"}),
  };
  testing::expect_resumes_in_a_cycle(meshes, "outside_moe_across_");
}

}  // namespace
}  // namespace carousel
