// test_pipeline_moe.cpp — mixture-of-experts models (docs/moe.md) on simulated devices train like
// the single-device model (PipelineEquivalence, tests/support/pipeline_equivalence.h): the loss,
// the gradient norm at step 0 and the per-sequence balancing loss, for every schedule, FSDP's
// weight modes, data parallelism, ZeRO-1, uneven stages, remat policies, bfloat16 and context
// and tensor parallelism; top-1 and top-2, softmax and sigmoid routers, shared experts on and off, the
// auxiliary-loss-free bias instead of the loss. The
// tiny model's first layer stays dense, so stages mix dense and MoE layers.
#include <string>
#include <vector>

#include "tests/support/pipeline_equivalence.h"

namespace carousel {
namespace {

using testing::PipelineCase;
using testing::PipelineEquivalence;

// Four experts of width 32, a dense first layer, the balancing loss on; `routing` picks top-k,
// the router and the shared experts.
std::vector<std::string> moe(const std::string& routing, std::vector<std::string> keys) {
  std::vector<std::string> all = {"num_experts=4", "base_moe_mlp_dim=32",
                                  "first_num_dense_layers=1", "load_balance_loss_weight=0.01"};
  if (routing == "top2_shared") {
    all.insert(all.end(), {"num_experts_per_tok=2", "shared_experts=1"});
  } else if (routing == "top1") {
    all.insert(all.end(), {"num_experts_per_tok=1"});
  } else if (routing == "bias") {  // DeepSeek-V3's auxiliary-loss-free balancing instead
    all.insert(all.end(),
               {"num_experts_per_tok=2", "routed_score_func=sigmoid", "norm_topk_prob=true",
                "routed_bias=true", "routed_bias_update_rate=0.02", "load_balance_loss_weight=0"});
  } else {  // sigmoid: DeepSeek-V3's router
    all.insert(all.end(), {"num_experts_per_tok=2", "routed_score_func=sigmoid",
                           "norm_topk_prob=true", "routed_scaling_factor=2.5", "shared_experts=1"});
  }
  all.insert(all.end(), keys.begin(), keys.end());
  return all;
}

const std::string S2 = "ici_pipeline_parallelism=2", S4 = "ici_pipeline_parallelism=4",
                  M2 = "num_pipeline_microbatches=2", M4 = "num_pipeline_microbatches=4",
                  M8 = "num_pipeline_microbatches=8", F2 = "ici_fsdp_parallelism=2",
                  D2 = "ici_data_parallelism=2", L2 = "num_layers_per_pipeline_stage=2",
                  bsw = "pipeline_fsdp_ag_per_repeat=true";

INSTANTIATE_TEST_SUITE_P(
    Moe, PipelineEquivalence,
    ::testing::Values(
        PipelineCase{"moe_circular_S2_R2", moe("top2_shared", {S2, L2, M4})},
        PipelineCase{"moe_circular_S4_R2_top1", moe("top1", {S4, M4})},
        PipelineCase{
            "moe_gpipe_S4_sigmoid",
            moe("sigmoid", {S4, "pipeline_schedule=gpipe", "num_layers_per_pipeline_stage=2", M4})},
        PipelineCase{"moe_1f1b_S2", moe("top2_shared", {S2, "pipeline_schedule=1f1b",
                                                        "num_layers_per_pipeline_stage=4", M4})},
        PipelineCase{"moe_interleaved_1f1b_S2_top1",
                     moe("top1", {S2, L2, "pipeline_schedule=interleaved_1f1b", M4})},
        PipelineCase{"moe_zb_h1_S2_sigmoid", moe("sigmoid", {S2, "num_layers_per_pipeline_stage=4",
                                                             "pipeline_schedule=zb_h1", M4})},
        PipelineCase{"moe_interleaved_zb_S2",
                     moe("top2_shared", {S2, L2, "pipeline_schedule=interleaved_zb", M4})},
        PipelineCase{"moe_zbv_S2_top1", moe("top1", {S2, L2, "pipeline_schedule=zbv", M4})},
        PipelineCase{"moe_dualpipev_S2",
                     moe("top2_shared", {S2, L2, "pipeline_schedule=dualpipev", M4})},
        PipelineCase{"moe_dualpipev_S4_sigmoid",
                     moe("sigmoid", {S4, "pipeline_schedule=dualpipev", M8})},
        PipelineCase{"moe_looped_bfs_S4_R2", moe("top1", {S4, "pipeline_schedule=looped_bfs", M4})},
        PipelineCase{"moe_fsdp_S2_F2_gather_every_use", moe("top2_shared", {S2, F2, L2, M4}), 1e-6},
        PipelineCase{"moe_fsdp_S2_F2_bsw", moe("sigmoid", {S2, F2, L2, M4, bsw}), 1e-6},
        PipelineCase{"moe_fsdp_S2_F2_ag_once_top1",
                     moe("top1", {S2, F2, L2, M4, "pipeline_fsdp_ag_once=true"}), 1e-6},
        PipelineCase{"moe_fsdp_F4",
                     moe("top2_shared", {"ici_fsdp_parallelism=4", "num_pipeline_microbatches=2"}),
                     1e-6},
        PipelineCase{"moe_D2_S2", moe("top2_shared", {D2, S2, L2, M4}), 1e-6},
        PipelineCase{"moe_zero1_D2_S2_sigmoid",
                     moe("sigmoid", {D2, S2, L2, M4, "shard_optimizer_over_data=true"}), 1e-6},
        PipelineCase{"moe_uneven_S2_1331",
                     moe("top2_shared", {S2, "pipeline_stage_layers=[1,3,3,1]", M4})},
        PipelineCase{"moe_uneven_1f1b_S2_3_5", moe("top1", {S2, "pipeline_stage_layers=[3,5]",
                                                            "pipeline_schedule=1f1b", M4})},
        PipelineCase{"moe_remat_none_S2", moe("top2_shared", {S2, L2, M4, "remat_policy=none"})},
        PipelineCase{"moe_remat_minimal_S2_sigmoid",
                     moe("sigmoid", {S2, L2, M4, "remat_policy=minimal"})},
        PipelineCase{"moe_bf16_S2_F2", moe("top2_shared", {S2, F2, L2, M4, "dtype=bfloat16"}), 1e-4,
                     1e-2},
        // The auxiliary-loss-free bias: every rank moves it by the step's global loads.
        PipelineCase{"moe_routed_bias_S2_F2_bsw", moe("bias", {S2, F2, L2, M4, bsw}), 1e-6},
        PipelineCase{"moe_routed_bias_dualpipev_D2_S2",
                     moe("bias", {D2, S2, L2, "pipeline_schedule=dualpipev", M4}), 1e-6},
        // Expert parallelism: E ranks split the experts (and the batch), rows exchanged both
        // ways in every MoE layer, forward and backward.
        PipelineCase{"moe_expert_E2", moe("top2_shared", {"ici_expert_parallelism=2", M4}), 1e-6},
        PipelineCase{"moe_expert_E4_top1", moe("top1", {"ici_expert_parallelism=4", M2}), 1e-6},
        PipelineCase{"moe_expert_E2_S2_circular",
                     moe("sigmoid", {"ici_expert_parallelism=2", S2, L2, M4}), 1e-6},
        PipelineCase{"moe_expert_E2_S2_F2_bsw",
                     moe("top2_shared", {"ici_expert_parallelism=2", S2, F2, L2, M2, bsw}), 1e-6},
        PipelineCase{
            "moe_expert_E2_S2_dualpipev",
            moe("top1", {"ici_expert_parallelism=2", S2, L2, "pipeline_schedule=dualpipev", M4}),
            1e-6},
        // FSDP gathering per use: each pair's two stages gathered before it, so it takes turns.
        PipelineCase{"moe_expert_E2_F2_dualpipev_per_use",
                     moe("top2_shared", {"ici_expert_parallelism=2", F2, "num_pipeline_repeats=2",
                                         "num_layers_per_pipeline_stage=4",
                                         "pipeline_schedule=dualpipev", M2}),
                     1e-6},
        PipelineCase{"moe_expert_E2_D2_S2",
                     moe("sigmoid", {"ici_expert_parallelism=2", D2, S2, L2, M2}), 1e-6},
        PipelineCase{"moe_expert_E2_gpipe_S2",
                     moe("top1", {"ici_expert_parallelism=2", S2, "num_layers_per_pipeline_stage=4",
                                  "pipeline_schedule=gpipe", M2}),
                     1e-6},
        PipelineCase{"moe_expert_E2_interleaved_1f1b",
                     moe("top2_shared", {"ici_expert_parallelism=2", S2, L2,
                                         "pipeline_schedule=interleaved_1f1b", M4}),
                     1e-6},
        PipelineCase{
            "moe_expert_E2_zb_h1",
            moe("sigmoid", {"ici_expert_parallelism=2", S2, "num_layers_per_pipeline_stage=4",
                            "pipeline_schedule=zb_h1", M4}),
            1e-6},
        PipelineCase{"moe_expert_E2_interleaved_zb",
                     moe("top1", {"ici_expert_parallelism=2", S2, L2,
                                  "pipeline_schedule=interleaved_zb", M4}),
                     1e-6},
        PipelineCase{"moe_expert_E2_looped_bfs",
                     moe("top2_shared",
                         {"ici_expert_parallelism=2", S2, "pipeline_schedule=looped_bfs", M4}),
                     1e-6},
        PipelineCase{
            "moe_expert_E2_F2_ag_once",
            moe("sigmoid", {"ici_expert_parallelism=2", F2, M2, "pipeline_fsdp_ag_once=true"}),
            1e-6},
        PipelineCase{"moe_expert_E4_remat_none",
                     moe("top2_shared", {"ici_expert_parallelism=4", M2, "remat_policy=none"}),
                     1e-6},
        PipelineCase{"moe_expert_E2_remat_minimal",
                     moe("top1", {"ici_expert_parallelism=2", S2, L2, M4, "remat_policy=minimal"}),
                     1e-6},
        PipelineCase{"moe_expert_E2_zbv_bias",
                     moe("bias", {"ici_expert_parallelism=2", S2, L2, "pipeline_schedule=zbv", M4}),
                     1e-6},
        PipelineCase{
            "moe_expert_E4_S2_1f1b_uneven",
            moe("top2_shared", {"ici_expert_parallelism=4", S2, "pipeline_stage_layers=[3,5]",
                                "pipeline_schedule=1f1b", M2}),
            1e-6},
        PipelineCase{
            "moe_expert_E2_C2",
            moe("top2_shared", {"ici_expert_parallelism=2", "ici_context_parallelism=2", M4}),
            1e-6},
        PipelineCase{"moe_expert_E2_bf16",
                     moe("top2_shared", {"ici_expert_parallelism=2", S2, L2, M4, "dtype=bfloat16"}),
                     1e-4, 1e-2},
        // ZeRO-1 over the replicas of each expert rank (the dense tensors summed over the expert
        // ranks first).
        PipelineCase{"moe_expert_E2_D2_S2_zero1",
                     moe("top2_shared", {"ici_expert_parallelism=2", D2, S2, L2, M2,
                                         "shard_optimizer_over_data=true"}),
                     1e-6},
        PipelineCase{"moe_expert_E2_D2_F2_zero1_bias",
                     moe("bias", {"ici_expert_parallelism=2", D2, F2,
                                  "num_pipeline_microbatches=1", "shard_optimizer_over_data=true"}),
                     1e-6},
        // Tensor parallelism: every expert split by columns, the router whole on each rank.
        PipelineCase{"moe_tensor_T2", moe("top2_shared", {"ici_tensor_parallelism=2", M2}),
                     1e-6},
        PipelineCase{"moe_tensor_T2_S2_sigmoid",
                     moe("sigmoid", {"ici_tensor_parallelism=2", S2, L2, M4}), 1e-6},
        PipelineCase{"moe_tensor_T2_E2_top1",
                     moe("top1", {"ici_tensor_parallelism=2", "ici_expert_parallelism=2", M2}),
                     1e-6},
        PipelineCase{"moe_tensor_T2_E2_dualpipev_bias",
                     moe("bias", {"ici_tensor_parallelism=2", "ici_expert_parallelism=2", S2, L2,
                                  "pipeline_schedule=dualpipev", M4}),
                     1e-6},
        PipelineCase{"moe_tensor_T2_C2",
                     moe("top2_shared",
                         {"ici_tensor_parallelism=2", "ici_context_parallelism=2", M2}),
                     1e-6},
        // Context parallelism: each sequence's balancing counts and sums pooled over its ranks.
        PipelineCase{"moe_context_C2_S2",
                     moe("top2_shared", {S2, L2, M4, "ici_context_parallelism=2"}), 1e-6},
        PipelineCase{"moe_context_C4_sigmoid", moe("sigmoid", {"ici_context_parallelism=4", M2}),
                     1e-6}),
    [](const auto& info) { return info.param.name; });

// Experts are checkpointed as whole tensors under their global names, whoever holds them: a run
// on E expert ranks (and T tensor ranks, each with its columns; with ZeRO-1, the moments in
// pieces) resumes on another E (or none) and continues like the straight run (1e-5:
// gradients summed in another order), the loss-free bias included.
TEST(MoeCheckpoint, ResumesAcrossExpertDegrees) {
  const std::vector<std::vector<std::string>> meshes = {
      moe("bias", {"ici_expert_parallelism=2"}), moe("bias", {"ici_expert_parallelism=4"}),
      moe("bias", {"ici_expert_parallelism=2", "ici_pipeline_parallelism=2",
                   "ici_fsdp_parallelism=2", "num_layers_per_pipeline_stage=2"}),
      moe("bias", {"ici_tensor_parallelism=2", "ici_expert_parallelism=2"}),
      moe("bias", {"ici_expert_parallelism=2", "ici_data_parallelism=2",
                   "shard_optimizer_over_data=true"}),
      moe("bias", {})};
  testing::expect_resumes_in_a_cycle(meshes, "moe_across_");
  // The same layout resumes bitwise.
  const auto mesh = moe("top2_shared", {"ici_expert_parallelism=2", "ici_data_parallelism=2"});
  const auto [straight, resumed] = testing::resume_across(mesh, mesh, "moe_same");
  EXPECT_EQ(resumed, straight);
}

}  // namespace
}  // namespace carousel
