// test_pipeline_packing.cpp — packed documents (packing=true; the tiny corpus's lines are the
// documents, eos_id=10 is '\n') on simulated devices equal single-device training with packing
// (PipelineEquivalence, tests/support/pipeline_equivalence.h): pipelined, FSDP with BSW, tensor
// parallel (whose ranks hold a part of each token's rows), context parallel (each chunk attends
// the key prefix from its queries' document starts), data parallel, and a one-stage-per-rank
// schedule; every rank reads its microbatches' tokens for their document starts.
#include "tests/support/pipeline_equivalence.h"

namespace carousel {
namespace {

using testing::PipelineCase;
using testing::PipelineEquivalence;

INSTANTIATE_TEST_SUITE_P(
    Packing, PipelineEquivalence,
    ::testing::Values(
        PipelineCase{"packed_circular_S2_R2",
                     {"packing=true", "eos_id=10", "ici_pipeline_parallelism=2",
                      "num_layers_per_pipeline_stage=2", "num_pipeline_microbatches=4"}},
        PipelineCase{"packed_1f1b_S4",
                     {"packing=true", "eos_id=10", "ici_pipeline_parallelism=4",
                      "pipeline_schedule=1f1b", "num_pipeline_microbatches=4"}},
        PipelineCase{"packed_fsdp_S2_F2_bsw",
                     {"packing=true", "eos_id=10", "ici_pipeline_parallelism=2",
                      "ici_fsdp_parallelism=2", "num_layers_per_pipeline_stage=2",
                      "num_pipeline_microbatches=4", "pipeline_fsdp_ag_per_repeat=true"},
                     1e-6},
        PipelineCase{"packed_tensor_T2_S2",
                     {"packing=true", "eos_id=10", "ici_pipeline_parallelism=2",
                      "ici_tensor_parallelism=2", "num_layers_per_pipeline_stage=2",
                      "num_pipeline_microbatches=4"},
                     1e-6},
        PipelineCase{"packed_context_C2_S2",
                     {"packing=true", "eos_id=10", "ici_pipeline_parallelism=2",
                      "ici_context_parallelism=2", "num_layers_per_pipeline_stage=2",
                      "num_pipeline_microbatches=4"},
                     1e-6},
        PipelineCase{"packed_T2_C2",
                     {"packing=true", "eos_id=10", "ici_tensor_parallelism=2",
                      "ici_context_parallelism=2", "num_pipeline_microbatches=2"},
                     1e-6},
        PipelineCase{"packed_D2_S2",
                     {"packing=true", "eos_id=10", "ici_data_parallelism=2",
                      "ici_pipeline_parallelism=2", "num_layers_per_pipeline_stage=2",
                      "num_pipeline_microbatches=4"},
                     1e-6}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace carousel
