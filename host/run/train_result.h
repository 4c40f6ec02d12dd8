// train_result.h — what a call of train() returns: where the run went, its steps' metrics, and
// what its components measured (each fills its own fields; docs/architecture.md lists them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "host/run/step_report.h"

namespace carousel {

struct TrainResult {
  std::string run_directory;       // where metrics, logs and checkpoints went
  std::vector<StepMetrics> steps;  // the steps this call ran
  std::int64_t start_step = 0;     // > 0 when resumed from a checkpoint
  std::int64_t skipped_steps = 0;  // non-finite steps skipped so far (skip_step_on_nonfinite)
  bool stopped_by_signal = false;  // SIGTERM/SIGINT: stopped early after saving a checkpoint
  // profiler_steps: where the trace went, and the bubble measured vs the calibrated prediction.
  std::string trace_path;
  std::string costs_path;  // the calibrated schedule_cost_* keys (schedule_costs_file)
  double measured_bubble = -1, predicted_bubble = -1;
  // The schedule's span per step (first action to the last OPTIMIZER), measured and predicted.
  double measured_span_ms = -1, predicted_span_ms = -1;
  // The prediction with the measured spread of durations, and the traced steps replayed with
  // their own durations (cost_calibration.h).
  double spread_span_ms = -1, spread_bubble = -1;
  double replayed_span_ms = -1, replayed_bubble = -1;
  double exposed_gather_ms = -1;      // per rank and step: compute waiting for weight gathers
  // Per rank and step: expert exchanges from posting to completion, and compute waiting for them.
  double exchange_ms = -1, exposed_exchange_ms = -1;
  double calibrated_exchange_ms = -1;  // one exchange, as the prediction took it
  std::size_t peak_device_bytes = 0;  // the largest over the ranks
  std::vector<std::int64_t> all_gathers_per_device;  // FSDP weight gathers done, per rank
  std::vector<std::int64_t> graph_replays_per_device;  // steps launched from a captured graph
};

}  // namespace carousel
