// test_pipeline_dualpipev.cpp — dualpipev on simulated devices equals single-device training
// (PipelineEquivalence, tests/support/pipeline_equivalence.h): plain, each FSDP weight mode, data
// parallel and tied embeddings. A schedule's equivalence cases in a file of their own, as
// docs/schedules.md#adding-a-schedule asks of a new schedule.
#include "tests/support/pipeline_equivalence.h"

namespace carousel {
namespace {

using testing::PipelineCase;
using testing::PipelineEquivalence;

INSTANTIATE_TEST_SUITE_P(
    Dualpipev, PipelineEquivalence,
    ::testing::Values(
        // dualpipev: zbv's V, overlapped F&B pairs (run back to back here), full backwards in
        // the pairs and I/W splits at the ends, the Ws of different stages in one FIFO.
        PipelineCase{"dualpipev_S2_L2_M4",
                     {"ici_pipeline_parallelism=2", "num_layers_per_pipeline_stage=2",
                      "pipeline_schedule=dualpipev", "num_pipeline_microbatches=4"}},
        PipelineCase{"dualpipev_S4_M8",
                     {"ici_pipeline_parallelism=4", "pipeline_schedule=dualpipev",
                      "num_pipeline_microbatches=8"}},
        PipelineCase{"fsdp_dualpipev_S2_F2_gather_every_use",
                     {"ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2",
                      "num_layers_per_pipeline_stage=2", "pipeline_schedule=dualpipev",
                      "num_pipeline_microbatches=4"},
                     1e-6},
        PipelineCase{"fsdp_dualpipev_S2_F2_bsw",
                     {"ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2",
                      "num_layers_per_pipeline_stage=2", "pipeline_schedule=dualpipev",
                      "num_pipeline_microbatches=4", "pipeline_fsdp_ag_per_repeat=true"},
                     1e-6},
        PipelineCase{"fsdp_dualpipev_S2_F2_ag_once",
                     {"ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2",
                      "num_layers_per_pipeline_stage=2", "pipeline_schedule=dualpipev",
                      "num_pipeline_microbatches=4", "pipeline_fsdp_ag_once=true"},
                     1e-6},
        PipelineCase{"dualpipev_D2_S2",
                     {"ici_data_parallelism=2", "ici_pipeline_parallelism=2",
                      "num_layers_per_pipeline_stage=2", "pipeline_schedule=dualpipev",
                      "num_pipeline_microbatches=4"},
                     1e-6},
        PipelineCase{"tied_dualpipev_S2",
                     {"ici_pipeline_parallelism=2", "num_layers_per_pipeline_stage=2",
                      "pipeline_schedule=dualpipev", "num_pipeline_microbatches=4",
                      "logits_via_embedding=true"}}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace carousel
