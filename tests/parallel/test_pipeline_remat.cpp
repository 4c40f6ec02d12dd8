// test_pipeline_remat.cpp — the selective remat policies (models/stage.h) on simulated devices
// equal single-device training with remat=none's arithmetic (PipelineEquivalence,
// tests/support/pipeline_equivalence.h): pipelined, with FSDP, with tensor and context
// parallelism (whose recomputation repeats their collectives) and with the zero-bubble I/W split.
#include "tests/support/pipeline_equivalence.h"

namespace carousel {
namespace {

using testing::PipelineCase;
using testing::PipelineEquivalence;

INSTANTIATE_TEST_SUITE_P(
    Remat, PipelineEquivalence,
    ::testing::Values(
        PipelineCase{"remat_minimal_S2_R2",
                     {"remat_policy=minimal", "ici_pipeline_parallelism=2",
                      "num_layers_per_pipeline_stage=2", "num_pipeline_microbatches=4"}},
        PipelineCase{"remat_save_qkv_proj_fsdp_S2_F2",
                     {"remat_policy=save_qkv_proj", "ici_pipeline_parallelism=2",
                      "ici_fsdp_parallelism=2", "num_layers_per_pipeline_stage=2",
                      "num_pipeline_microbatches=4"},
                     1e-6},
        PipelineCase{"remat_save_dot_with_context_T2_C2",
                     {"remat_policy=save_dot_with_context_except_mlp", "ici_tensor_parallelism=2",
                      "ici_context_parallelism=2", "num_pipeline_microbatches=2"},
                     1e-6},
        PipelineCase{"remat_save_out_proj_zb_h1_S2",
                     {"remat_policy=save_out_proj", "ici_pipeline_parallelism=2",
                      "pipeline_schedule=zb_h1", "num_pipeline_microbatches=4"}}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace carousel
