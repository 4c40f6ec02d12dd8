// profiled_run.h — the keys of one small profiled run (tiny Llama, 4 layers, 1f1b on 2 stages,
// 4 microbatches, the last 2 of 4 steps traced), whose trace calibrates costs for the tests of
// host/report/cost_calibration and of the planner's --costs-file.
#pragma once

#include <string>
#include <vector>

namespace carousel::testing {

inline std::vector<std::string> profiled_two_stage_run(const std::string& output_directory) {
  return {"max_target_length=16",
          "base_num_decoder_layers=4",
          "ici_pipeline_parallelism=2",
          "pipeline_schedule=1f1b",
          "num_pipeline_repeats=1",
          "num_layers_per_pipeline_stage=2",
          "num_pipeline_microbatches=4",
          "per_device_batch_size=4",
          "steps=4",
          "profiler_steps=2",
          "skip_first_n_steps_for_profiler=2",
          "enable_checkpointing=false",
          "base_output_directory=" + output_directory,
          "run_name=costs"};
}

}  // namespace carousel::testing
