// trainer.h — `carousel train`: the one training loop, for every mesh.
//
// A run has D data replicas x S pipeline stages x F FSDP ranks (host/mesh.h); one device is the
// trivial mesh 1 x 1 x 1, whose program runs the whole model as one stage and the microbatches
// one after the other (gradient accumulation). Every rank builds the same lowered program
// (host/schedule), owns its parameters (host/sharded_params.h) and walks its instructions
// (host/rank_executor.h). Around the steps, the loop here does, once for every mesh: resume from
// the newest checkpoint of the run directory or start from load_parameters_path or the initial
// values, time and report each step (rank 0), and write checkpoints on their cadence (the
// whole-model files a single-device run writes, so any layout resumes any other, bitwise when
// the layout is the same).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "host/config.h"

namespace carousel {

struct StepMetrics {
  std::int64_t step = 0;  // 0-based
  double loss = 0, grad_norm = 0, learning_rate = 0, step_ms = 0, tokens_per_second = 0;
  double flops_per_second = 0;  // model FLOPs (6 x params x tokens + attention) per second
  double eval_loss = -1;        // held-out loss after this step (eval_interval), -1 when none
};

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
  double exposed_gather_ms = -1;  // per rank and step: compute waiting for weight gathers
  std::size_t peak_device_bytes = 0;                 // the largest over the ranks
  std::vector<std::int64_t> all_gathers_per_device;  // FSDP weight gathers done, per rank
};

// An empty cfg.run_name gets a new run directory (host/run_name.h); TrainResult says which.
// process_world: nullptr runs the D x S x F ranks as threads of this process; otherwise this
// process is rank process_world->rank() of a job of exactly D x S x F processes (mpirun).
TrainResult train(const Config& cfg, Communicator* process_world = nullptr);

}  // namespace carousel
