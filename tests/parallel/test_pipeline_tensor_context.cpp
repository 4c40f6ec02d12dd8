// test_pipeline_tensor_context.cpp — tensor parallelism (with sequence parallelism) and context
// parallelism, alone and together, composed with the pipeline schedules, FSDP in each weight
// mode, data replicas with and without ZeRO-1, tied embeddings, uneven stages, remat and
// bfloat16: every case trains like the single-device model (PipelineEquivalence,
// tests/parallel/test_pipeline.cpp). Step 0 agrees to float32 rounding (1e-6: the row-parallel
// GEMMs sum the tensor ranks' partial products in another order, context ranks sum their
// tokens' gradients; 1e-2
// in bfloat16, where those partial sums are rounded to bfloat16 before they are added, and 1e-2
// for its later steps too).
#include <filesystem>
#include <string>
#include <vector>

#include "host/run/trainer.h"
#include "tests/support/pipeline_equivalence.h"

namespace carousel {
namespace {

using testing::PipelineCase;
using testing::PipelineEquivalence;
using testing::resume_across;

// The layouts each tensor degree is combined with: name, keys, step-0 tolerance.
std::vector<PipelineCase> layouts() {
  const std::string S2 = "ici_pipeline_parallelism=2", M2 = "num_pipeline_microbatches=2",
                    M4 = "num_pipeline_microbatches=4", F2 = "ici_fsdp_parallelism=2",
                    D2 = "ici_data_parallelism=2", L4 = "base_num_decoder_layers=4",
                    L2 = "num_layers_per_pipeline_stage=2";
  return {
      {"only", {M2}, 1e-6},
      {"circular_S2_M4", {S2, M4}, 1e-6},
      {"circular_S2_remat_none", {S2, M4, "remat_policy=none"}, 1e-6},
      {"gpipe_S2", {S2, L4, L2, "pipeline_schedule=gpipe", M4}, 1e-6},
      {"1f1b_S2", {S2, L4, L2, "pipeline_schedule=1f1b", M4}, 1e-6},
      {"interleaved_1f1b_S2", {S2, "pipeline_schedule=interleaved_1f1b", M4}, 1e-6},
      {"zb_h1_S2", {S2, L4, L2, "pipeline_schedule=zb_h1", M4}, 1e-6},
      {"interleaved_zb_S2", {S2, "pipeline_schedule=interleaved_zb", M4}, 1e-6},
      {"zbv_S2", {S2, L4, "pipeline_schedule=zbv", M4}, 1e-6},
      {"dualpipev_S2", {S2, L4, "pipeline_schedule=dualpipev", M4}, 1e-6},
      {"fsdp_F2_gather_every_use", {S2, F2, M4}, 1e-6},
      {"fsdp_F2_bsw", {S2, F2, M4, "pipeline_fsdp_ag_per_repeat=true"}, 1e-6},
      {"fsdp_F2_ag_once", {S2, F2, M2, "pipeline_fsdp_ag_once=true"}, 1e-6},
      {"data_D2", {D2, S2, M2}, 1e-6},
      {"zero1_D2_F2_bsw",
       {D2, F2, M2, "pipeline_fsdp_ag_per_repeat=true", "shard_optimizer_over_data=true"},
       1e-6},
      {"tied_S2", {S2, M4, "logits_via_embedding=true"}, 1e-6},
      {"uneven_S2", {S2, L4, "pipeline_stage_layers=[1,3]", "pipeline_schedule=1f1b", M4}, 1e-6},
      {"bf16_fsdp_F2_bsw",
       {S2, F2, M4, "pipeline_fsdp_ag_per_repeat=true", "dtype=bfloat16"},
       1e-2,
       1e-2},
  };
}

// Tensor degree T (KV heads split at 2, shared by two ranks at 4) and context degree C (the
// 16-token sequences in 2C chunks), each layout with each.
std::vector<PipelineCase> tensor_cases() {
  std::vector<PipelineCase> out;
  for (const auto& [T, C] :
       {std::pair{2, 1}, std::pair{4, 1}, std::pair{1, 2}, std::pair{1, 4}, std::pair{2, 2}}) {
    for (PipelineCase c : layouts()) {
      c.name = "T" + std::to_string(T) + "_C" + std::to_string(C) + "_" + c.name;
      c.keys.push_back("ici_tensor_parallelism=" + std::to_string(T));
      c.keys.push_back("ici_context_parallelism=" + std::to_string(C));
      out.push_back(c);
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Tensor, PipelineEquivalence, ::testing::ValuesIn(tensor_cases()),
                         [](const auto& info) { return info.param.name; });

// A checkpoint holds whole Hugging Face tensors: the same tensor and context layout resumes it
// bitwise (each rank cuts the same parts out again, moments included), and any other tensor or
// context degree, FSDP or data layout continues like the straight run (1e-5: partial sums and
// the norm in another order).
TEST(TensorCheckpoint, ResumesBitwiseOnTheSameLayout) {
  for (const std::vector<std::string>& mesh :
       {std::vector<std::string>{"ici_tensor_parallelism=2", "ici_fsdp_parallelism=2",
                                 "ici_data_parallelism=2", "shard_optimizer_over_data=true"},
        std::vector<std::string>{"ici_context_parallelism=2", "ici_tensor_parallelism=2",
                                 "ici_data_parallelism=2", "shard_optimizer_over_data=true"}}) {
    const auto [straight, resumed] = resume_across(mesh, mesh, "tensor_same_" + mesh[0]);
    ASSERT_EQ(resumed.size(), 2u);
    EXPECT_EQ(resumed, straight);
  }
}

TEST(TensorCheckpoint, ResumesAcrossTensorAndContextDegrees) {
  const std::vector<std::vector<std::string>> meshes = {
      {"ici_tensor_parallelism=4"},                                // KV heads shared by 2 ranks
      {"ici_tensor_parallelism=2", "ici_pipeline_parallelism=2"},  // KV heads split
      {"ici_context_parallelism=2"},
      {"ici_context_parallelism=4", "ici_tensor_parallelism=2"},
      {},  // one device
      {"ici_tensor_parallelism=2", "ici_data_parallelism=2", "shard_optimizer_over_data=true"}};
  for (std::size_t i = 0; i < meshes.size(); ++i) {  // each mesh resumes the next one's
    const auto& from = meshes[i];
    const auto& to = meshes[(i + 1) % meshes.size()];
    const auto [straight, resumed] = resume_across(from, to, "tensor_across_" + std::to_string(i));
    ASSERT_EQ(resumed.size(), 2u);
    for (std::size_t s = 0; s < 2; ++s)
      EXPECT_NEAR(resumed[s], straight[s], 1e-5 * straight[s]) << i;
  }
}

}  // namespace
}  // namespace carousel
