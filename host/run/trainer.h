// trainer.h — `carousel train`: the one training loop, for every mesh.
//
// A run has D data replicas x S pipeline stages x F FSDP ranks (host/mesh/mesh.h); one device
// is the trivial mesh 1 x 1 x 1, whose program runs the whole model as one stage and the
// microbatches one after the other (gradient accumulation). Every rank builds the same lowered
// program (host/schedule), owns its parameters (host/runtime/sharded_params.h) and walks its
// instructions (host/runtime/rank_executor.h). Around the steps, train() sequences the run's
// components, the same for every mesh, each in its own file of host/run/ and owning its cadence:
// the plan (run_setup.h), the starting point and checkpoints (checkpointer.h), evaluation
// (evaluator.h), profiling (profiler.h), the agreement to stop (stop_agreement.h), the step
// report (step_report.h) and what is known of each rank (rank_monitor.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "host/config/config.h"
#include "host/run/train_result.h"

namespace carousel {

// An empty cfg.run_name gets a new run directory (host/config/run_name.h); TrainResult says which.
// process_world: nullptr runs the D x E x S x F x T x C ranks as threads of this process; otherwise
// this process is rank process_world->rank() of a job of exactly D x E x S x F x T x C processes
// (mpirun).
TrainResult train(const Config& cfg, Communicator* process_world = nullptr);

}  // namespace carousel
